/* outer.c: not written yet. */
typedef int zb_placeholder_outer;
