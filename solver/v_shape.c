/* v_shape.c: not written yet. */
typedef int zb_placeholder_v_shape;
