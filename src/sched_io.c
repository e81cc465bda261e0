/* sched_io.c: not written yet. */
typedef int zb_placeholder_sched_io;
