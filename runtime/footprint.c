/*
 * footprint.c: the CPU trainer's fixed memory before creating it
 * (footprint.h).
 */
#include "runtime/footprint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/llama.h"
#include "runtime/split.h"

int trainer_footprint(const zb_model *m, int n_stages, const int *layers_per_stage,
                      double *params, double *bytes, zb_err *err)
{
    if (n_stages <= 0)
        return zb_fail(err, "cannot split a model into %d stages", n_stages);
    int *first = malloc(sizeof *first * (size_t)(n_stages + 1));
    if (!first)
        return zb_fail(err, "out of memory");
    if (layers_per_stage) {
        first[0] = 0;
        for (int i = 0; i < n_stages; i++)
            first[i + 1] = first[i] + (layers_per_stage[i] > 0 ? layers_per_stage[i] : 0);
        int covered = first[n_stages];
        if (covered != m->n_layers) {
            free(first);
            return zb_fail(err, "the split covers %d layers but model %s has %d", covered,
                           m->name, m->n_layers);
        }
    } else if (split_layers(m->n_layers, n_stages, first, err) != 0) {
        free(first);
        return -1;
    }
    double total = 0;
    for (int i = 0; i < n_stages; i++) {
        llama_stage st;
        if (llama_stage_init(&st, m, first[i], first[i + 1], i == 0, i == n_stages - 1, err) != 0) {
            free(first);
            return zb_wrap(err, "stage %d: ", i);
        }
        total += (double)llama_stage_num_params(&st);
        llama_stage_free(&st);
    }
    free(first);
    *params = total;
    *bytes = total * sizeof(float) * TRAINER_PARAM_COPIES;
    return 0;
}

double host_available_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return (double)kb * 1024.0;
            }
        }
        fclose(f);
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 0;
}
