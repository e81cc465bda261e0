/*
 * export_pytorch.c: the JSON sidecar of --format pytorch (export.h).
 *
 * torch.distributed.pipelining takes the op order from the CSV and
 * everything else from the user's model code.  The sidecar is what that
 * code needs from the plan, in one small JSON object that
 * examples/pytorch/train_plan.py reads (docs/pytorch.md):
 *
 *   {"format": "zbsched-pytorch-plan", "version": 1,
 *    "source": "best.json", "csv": "job.csv",
 *    "schedule": "zb-v", "pipeline_parallel": 2, "data_parallel": 1,
 *    "zero1_dp": 1, "stages": 4, "placement": [0, 1, 1, 0],
 *    "micro_batch": 2, "n_micro": 8, "global_batch": 16,
 *    "layers_per_stage": [1, 1, 1, 1], "first_layer": [0, 1, 2, 3],
 *    "recompute": ["none", "full", "none", "mlp"],
 *    "model": { zb_model fields, as in the schedule file's meta }}
 *
 * "csv" is relative to the sidecar's directory.  "recompute" names each
 * stage's level: "full" (every layer's forward rerun in its backward),
 * "mlp" (only the MLP blocks), "none".
 */
#include "export/export_internal.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "src/cost_model.h"

static cJSON *int_array(const int *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateNumber(v[i]);
        if (!x) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, x);
    }
    return a;
}

char *export_pytorch_text(const sched_t *s, const zb_plan *p, const char *source,
                          const char *csv_ref, zb_err *err)
{
    int S = s->n_stages;
    int *first = malloc(sizeof *first * (size_t)S);
    cJSON *o = cJSON_CreateObject(), *rc = cJSON_CreateArray();
    int bad = !first || !o || !rc;
    for (int i = 0, l = 0; first && i < S; l += p->layers[i], i++)
        first[i] = l;
    if (!bad) {
        bad |= !cJSON_AddStringToObject(o, "format", "zbsched-pytorch-plan");
        bad |= !cJSON_AddNumberToObject(o, "version", 1);
        bad |= !cJSON_AddStringToObject(o, "source", source ? source : "-");
        bad |= !cJSON_AddStringToObject(o, "csv", csv_ref ? csv_ref : "");
        bad |= !cJSON_AddStringToObject(o, "schedule", p->schedule[0] ? p->schedule : s->name);
        bad |= !cJSON_AddNumberToObject(o, "pipeline_parallel", p->pipeline_parallel);
        bad |= !cJSON_AddNumberToObject(o, "data_parallel", p->data_parallel);
        bad |= !cJSON_AddNumberToObject(o, "zero1_dp", p->zero1_dp);
        bad |= !cJSON_AddNumberToObject(o, "stages", S);
        cJSON *a = int_array(s->stage_device, S);
        bad |= !a || !cJSON_AddItemToObject(o, "placement", a);
        bad |= !cJSON_AddNumberToObject(o, "micro_batch", p->micro_batch);
        bad |= !cJSON_AddNumberToObject(o, "n_micro", p->n_micro);
        bad |= !cJSON_AddNumberToObject(o, "global_batch", p->global_batch);
        a = int_array(p->layers, S);
        bad |= !a || !cJSON_AddItemToObject(o, "layers_per_stage", a);
        a = int_array(first, S);
        bad |= !a || !cJSON_AddItemToObject(o, "first_layer", a);
        for (int i = 0; i < S; i++) {
            cJSON *x = cJSON_CreateString(p->recompute[i] == COST_RC_FULL  ? "full"
                                          : p->recompute[i] == COST_RC_MLP ? "mlp"
                                                                           : "none");
            bad |= !x;
            if (x)
                cJSON_AddItemToArray(rc, x);
        }
        bad |= !cJSON_AddItemToObject(o, "recompute", rc);
        rc = NULL;
        cJSON *m = model_to_json(&p->model);
        bad |= !m || !cJSON_AddItemToObject(o, "model", m);
    }
    char *text = bad ? NULL : cJSON_Print(o);
    cJSON_Delete(o);
    cJSON_Delete(rc);
    free(first);
    if (!text) {
        zb_fail(err, "out of memory writing the sidecar");
        return NULL;
    }
    /* one line end, as every text zbsched writes */
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (!withnl) {
        free(text);
        zb_fail(err, "out of memory writing the sidecar");
        return NULL;
    }
    withnl[n] = '\n';
    withnl[n + 1] = '\0';
    return withnl;
}
