/* cost_model.c: not written yet. */
typedef int zb_placeholder_cost_model;
