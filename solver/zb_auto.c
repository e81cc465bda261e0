/* zb_auto.c: not written yet. */
typedef int zb_placeholder_zb_auto;
