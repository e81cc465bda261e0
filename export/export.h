/*
 * export.h: a whole plan written in the terms of the engine that will run
 * it.
 *
 * A `zbsched search` file holds an op order and, in its meta, the rest of
 * the plan (src/plan.h): the model, the layers of every virtual stage,
 * which stages recompute and how, the micro-batch, the number of
 * micro-batches, the data-parallel width and the global batch.  An engine
 * needs all of it to run the plan as it was priced; the op order alone
 * runs out of memory where the plan recomputes.  Each format writes what
 * its engine reads:
 *
 *   zbsched      the schedule file itself (zbsched runs it as it is)
 *   torch-csv    PyTorch pipelining's compute-only CSV (src/torch_csv.h):
 *                the op order only
 *   pytorch      that CSV, and beside it a JSON sidecar with the split,
 *                per-stage recompute, micro-batch and widths, which
 *                examples/pytorch/train_plan.py reads
 *   torchtitan   a torchtitan v0.2.x TOML job ([parallelism] schedule,
 *                module_fqns_per_model_part, micro-batch, degrees;
 *                [training] batches; [activation_checkpoint]) and the CSV
 *                beside it, which the TOML names
 *   megatron     Megatron-LM's command-line flags, one per line
 *                (--pipeline-model-parallel-layout, --recompute-*, batch
 *                sizes, --use-distributed-optimizer, the model's shape)
 *
 * What an engine cannot express is refused before anything is written,
 * in one line that names the engine's limit and the `zbsched search
 * --target T` command that plans the same job within it
 * (export_check).  The limits come from the engines' own code
 * (docs/export.md names the versions):
 *
 *   every engine but zbsched   no vocabulary passes (S, T and their barriers)
 *   torchtitan                 looped placement (PipelineScheduleMulti) or V
 *                              placement (ZBVZeroBubble) only; one
 *                              activation-checkpoint policy for all stages,
 *                              none or full (no MLP-only level); the Llama
 *                              architecture (SwiGLU, untied head, no memory
 *                              layers); ZeRO over the data-parallel ranks
 *   megatron                   1F1B or interleaved 1F1B (fused backward),
 *                              looped placement; recompute the same for all
 *                              stages; no memory layers; ZeRO over the
 *                              data-parallel ranks; m a multiple of p when
 *                              interleaved
 *
 * Files: the formats with a CSV beside the main output name it after the
 * output with its extension replaced (`-o job.toml` writes job.csv), and
 * refuse an output whose CSV would be the output itself.  Every file goes
 * through the atomic writer (src/outfile.h), the CSV first, so that the
 * file naming it never points at an old or missing CSV.
 *
 * Workload: one export per command; text of at most a few megabytes (the
 * CSV of a large schedule).
 */
#ifndef ZB_EXPORT_H
#define ZB_EXPORT_H

#include "src/err.h"
#include "src/plan.h"
#include "src/sched.h"

typedef enum export_format {
    EXPORT_ZBSCHED = 0,    /* the schedule file itself */
    EXPORT_TORCH_CSV = 1,  /* PyTorch pipelining compute-only CSV */
    EXPORT_PYTORCH = 2,    /* the CSV plus a JSON sidecar for examples/pytorch */
    EXPORT_TORCHTITAN = 3, /* torchtitan TOML plus the CSV */
    EXPORT_MEGATRON = 4,   /* Megatron-LM flags */
    EXPORT_FORMAT_COUNT
} export_format;

/* Most files one export writes. */
#define EXPORT_MAX_FILES 2

/* "zbsched", "torch-csv", "pytorch", "torchtitan", "megatron". */
const char *export_format_name(export_format f);

/* Parses a format name; returns the format or -1. */
int export_format_parse(const char *name);

/* The engine a format is for (zbsched, torch, torchtitan, megatron). */
plan_target export_format_target(export_format f);

/* The format `export` writes when none is asked for: the target's when
 * the plan names one (zbsched: the schedule file; torch: torch-csv;
 * torchtitan; megatron); for a plan without a target (searched for
 * zbsched before --target existed), torch-csv when PyTorch can express
 * it, as export always wrote, else the schedule file; torch-csv for a
 * file without a plan (p NULL). */
export_format export_default_format(const sched_t *s, const zb_plan *p);

/* The format an output name asks for when --format is not given: ".csv"
 * torch-csv, ".toml" torchtitan, ".json" zbsched (the schedule file);
 * -1 for any other name or NULL (then export_default_format decides).
 * A user who names the output best.csv wants the CSV, whatever engine the
 * plan was searched for; export_check still refuses a plan the CSV
 * cannot express, naming the search that plans for PyTorch. */
int export_format_for_path(const char *out_path);

/* Whether format f can express schedule s with plan p (NULL: the file has
 * none; the formats that need a plan then refuse).  s is validated.
 * Returns 0, or -1 with err holding the one line to print: what the
 * engine cannot do and, for a search plan, the `zbsched search --target`
 * command that plans within it. */
int export_check(const sched_t *s, const zb_plan *p, export_format f, zb_err *err);

/* The files an export to out writes, main output first: n of them in
 * paths[0..n) (malloc'd; free with export_paths_free).  out NULL or "-"
 * is standard output, which only the one-file formats take.  Returns 0,
 * or -1 with err set (stdout for a two-file format, an output whose CSV
 * would be itself, a zbsched export to a name that is not .json). */
int export_paths(export_format f, const char *out, char *paths[EXPORT_MAX_FILES], int *n,
                 zb_err *err);

void export_paths_free(char *paths[EXPORT_MAX_FILES], int n);

/* The text of the main output of format f for s and p (which
 * export_check accepts), with csv_ref the CSV's name as the text should
 * refer to it (torchtitan: the path torchtitan opens; pytorch: the name
 * beside the sidecar; NULL for the one-file formats) and source the plan
 * file's name for the header comments.  Returns a malloc'd NUL-terminated
 * string, or NULL with err set. */
char *export_text(const sched_t *s, const zb_plan *p, export_format f, const char *source,
                  const char *csv_ref, zb_err *err);

/* export_check, then every file of export_paths written atomically, the
 * CSV first.  Returns 0, or -1 with err set (nothing written when the
 * check fails). */
int export_write(const sched_t *s, const zb_plan *p, export_format f, const char *source,
                 const char *out, zb_err *err);

/* One line on what the torch-csv output leaves out of plan p (the split,
 * the recompute stages, micro-batch and widths, which the CSV has no
 * place for) into buf[cap], for the CLI to print; "" when p is NULL. */
void export_csv_note(const zb_plan *p, char *buf, size_t cap);

#endif
