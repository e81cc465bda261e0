/*
 * viz_fixtures.c: hand-built test schedules (see viz_fixtures.h).
 */
#include "tests/viz/viz_fixtures.h"

#include <stdlib.h>
#include <string.h>

sched_t *fixture_1f1b(int p, int m)
{
    sched_t *s = sched_new(p, m, p);
    if (!s)
        return NULL;
    sched_place_interleaved(s);
    strcpy(s->name, "1f1b");
    for (int r = 0; r < p; r++) {
        int warm = p - 1 - r < m ? p - 1 - r : m, next_f = 0;
        for (; next_f < warm; next_f++)
            if (sched_push(s, r, OP_F, r, next_f))
                goto oom;
        for (int i = 0; i < m; i++) {
            if (next_f < m && sched_push(s, r, OP_F, r, next_f++))
                goto oom;
            if (sched_push(s, r, OP_BW, r, i))
                goto oom;
        }
    }
    return s;
oom:
    sched_free(s);
    return NULL;
}

sched_t *fixture_zb_h1(int p, int m)
{
    sched_t *s = sched_new(p, m, p);
    if (!s)
        return NULL;
    sched_place_interleaved(s);
    strcpy(s->name, "zb-h1");
    for (int r = 0; r < p; r++) {
        int warm = p - 1 - r < m ? p - 1 - r : m, next_f = 0, next_w = 0;
        for (; next_f < warm; next_f++)
            if (sched_push(s, r, OP_F, r, next_f))
                goto oom;
        for (int i = 0; i < m; i++) {
            if (next_f < m && sched_push(s, r, OP_F, r, next_f++))
                goto oom;
            if (sched_push(s, r, OP_B, r, i))
                goto oom;
            if (i >= r && sched_push(s, r, OP_W, r, next_w++))
                goto oom;
        }
        while (next_w < m)
            if (sched_push(s, r, OP_W, r, next_w++))
                goto oom;
    }
    return s;
oom:
    sched_free(s);
    return NULL;
}

sched_t *fixture_v(int p, int m)
{
    sched_t *s = sched_new(p, m, 2 * p);
    if (!s)
        return NULL;
    sched_place_v(s);
    strcpy(s->name, "v-gpipe");
    for (int d = 0; d < p; d++) {
        int first = d, second = 2 * p - 1 - d;
        for (int j = 0; j < m; j++)
            if (sched_push(s, d, OP_F, first, j))
                goto oom;
        for (int j = 0; j < m; j++)
            if (sched_push(s, d, OP_F, second, j))
                goto oom;
        for (int j = 0; j < m; j++)
            if (sched_push(s, d, OP_B, second, j))
                goto oom;
        for (int j = 0; j < m; j++)
            if (sched_push(s, d, OP_B, first, j))
                goto oom;
        for (int j = 0; j < m; j++)
            if (sched_push(s, d, OP_W, second, j) || sched_push(s, d, OP_W, first, j))
                goto oom;
    }
    return s;
oom:
    sched_free(s);
    return NULL;
}

int fixture_add_times(sched_t *s)
{
    /* Lanes are filled in device order with each op starting when the
     * previous one on its device ended; dependencies across devices are not
     * honoured, which the renderers do not need. */
    for (int d = 0; d < s->n_devices; d++) {
        if (sched_lane_alloc_times(s, d))
            return -1;
        double t = 0.5 * d;
        sched_lane *l = &s->dev[d];
        for (int i = 0; i < l->n_ops; i++) {
            double dur = sched_op_time(s, l->ops[i]) * (1 + 0.1 * ((d + i) % 3));
            l->start[i] = t;
            l->end[i] = t + dur;
            t += dur + (i % 4 == 0 ? 0.25 : 0);
        }
    }
    return 0;
}

void fixture_fuse_even(sched_t *s)
{
    for (int d = 0; d < s->n_devices; d++) {
        sched_lane *l = &s->dev[d];
        int n = 0;
        for (int i = 0; i < l->n_ops; i++) {
            sched_op op = l->ops[i];
            if (op.mb % 2 == 0 && op.kind == OP_W)
                continue;
            if (op.mb % 2 == 0 && op.kind == OP_B)
                op.kind = OP_BW;
            l->ops[n++] = op;
        }
        l->n_ops = n;
    }
}
