/* torch_csv.c: not written yet. */
typedef int zb_placeholder_torch_csv;
