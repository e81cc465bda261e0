/*
 * torch_csv.h: PyTorch pipelining's compute-only CSV schedule format.
 *
 * torch.distributed.pipelining (and torchtitan's
 * --parallelism.pipeline_parallel_schedule_csv) reads a schedule as one row
 * per rank of comma-separated actions written <stage><type><mb>, e.g.
 * "0F3".  Types: F forward, I backward for the input gradient (our B),
 * W backward for the weight gradient (our W), B full backward (our BW).  An
 * empty cell is an idle slot; spaces around actions are allowed.
 *
 * Import also reads what PyTorch's "compute_comms" dumps hold: their
 * communication and FSDP actions (SEND_F, RECV_B, UNSHARD, REDUCE_GRAD,
 * ...) are dropped and counted, since PyTorch and our runtime both derive
 * them from the compute order, and ScheduleDualPipeV's "(a;b)OVERLAP_F_B"
 * cells are expanded into their sub-actions in order.  Export writes
 * compute actions only.
 */
#ifndef ZB_TORCH_CSV_H
#define ZB_TORCH_CSV_H

#include "src/sched.h"

/* Whether PyTorch's CSV can express s.  It cannot express vocabulary
 * parallelism: its actions are per stage (F, I, W, B) and it has neither
 * the S and T passes of the sharded output layer nor their all-reduce
 * barriers.  Returns 0, or -1 with err saying so. */
int torch_csv_check(const sched_t *s, zb_err *err);

/* Returns the CSV text of s (which torch_csv_check accepts) (one row per device, "\n" line ends) as a
 * malloc'd NUL-terminated string (caller frees), or NULL when memory runs
 * out. */
char *torch_csv_write(const sched_t *s);

/* Parses len bytes of CSV (need not be NUL-terminated).  Devices = rows
 * up to the last row with an action (blank rows after it are not ranks;
 * blank rows before it are idle ranks, at most as many as the ranks with
 * actions), stages = largest stage index + 1,
 * micro-batches = n_micro when positive, else largest index + 1; each
 * stage is placed on the row that lists it (a stage on two rows is an
 * error, so is a stage on none).  Costs and memory deltas are sched_new's
 * defaults: the caller sets the real ones.  On success stores a new
 * schedule in *out (caller frees) and returns 0; otherwise returns -1 with
 * err naming the row and action. */
int torch_csv_read(const char *text, size_t len, int n_micro, sched_t **out, zb_err *err);

/* What an import left out or rewrote, for the user to see. */
typedef struct torch_csv_stats {
    long dropped_comm;      /* communication and FSDP actions dropped */
    long overlaps_expanded; /* OVERLAP_F_B groups split into their sub-actions */
} torch_csv_stats;

/* torch_csv_read, also filling *stats (when not NULL) on success. */
int torch_csv_read_stats(const char *text, size_t len, int n_micro, sched_t **out,
                         torch_csv_stats *stats, zb_err *err);

#endif
