/*
 * compare_note.c: predicted against measured in one line (compare_note.h).
 */
#include "src/cli/compare_note.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "viz/times.h"

/* Milliseconds per time unit, 0 for abstract units. */
static double unit_ms(const char *unit)
{
    if (!strcmp(unit, "s"))
        return 1e3;
    if (!strcmp(unit, "ms"))
        return 1;
    if (!strcmp(unit, "us"))
        return 1e-3;
    if (!strcmp(unit, "ns"))
        return 1e-6;
    return 0;
}

/* meas's measured activation peak of device d, or -1 when absent. */
static double measured_peak(const sched_t *meas, int d)
{
    const cJSON *mo = meas->meta ? cJSON_GetObjectItemCaseSensitive(meas->meta, "measured") : NULL;
    const cJSON *a = mo ? cJSON_GetObjectItemCaseSensitive(mo, "device_peak_activation_bytes") : NULL;
    const cJSON *v = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, d) : NULL;
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int compare_note_print(const sched_t *pred, const sched_t *meas, FILE *out, zb_err *err)
{
    viz_times tp, tm;
    if (viz_times_compute(pred, &tp, err) != 0)
        return -1;
    if (viz_times_compute(meas, &tm, err) != 0) {
        viz_times_free(&tp);
        return -1;
    }
    double up = unit_ms(pred->time_unit), um = unit_ms(meas->time_unit);
    double p_span = tp.t1 - tp.t0, m_span = tm.t1 - tm.t0;
    if (up == 0 || um == 0) {
        fprintf(out, "predicted %.4g %s, measured %.4g %s per iteration: the units differ, so "
                "there is no ratio; for one scale in ms, plan with measured costs (zbsched "
                "profile --model M -o prof.json, then zbsched search --profile prof.json --model M "
                "...) and run that plan\n", p_span, pred->time_unit[0] ? pred->time_unit : "units",
                m_span, meas->time_unit[0] ? meas->time_unit : "units");
    } else {
        double p_ms = p_span * up, m_ms = m_span * um;
        fprintf(out, "iteration: predicted %.1f ms, measured %.1f ms, measured/predicted %.2f",
                p_ms, m_ms, p_ms > 0 ? m_ms / p_ms : 0.0);
        /* memory: the measured peak device against the prediction there */
        int dev = -1;
        double m_peak = -1;
        for (int d = 0; d < meas->n_devices; d++) {
            double v = measured_peak(meas, d);
            if (v > m_peak) {
                m_peak = v;
                dev = d;
            }
        }
        if (dev >= 0 && !strcmp(pred->mem_unit, "bytes") && pred->n_devices == meas->n_devices) {
            double p_peak = -1;
            int p_dev = 0;
            for (int d = 0; d < pred->n_devices; d++)
                if (tp.r.dev[d].peak_mem > p_peak) {
                    p_peak = tp.r.dev[d].peak_mem;
                    p_dev = d;
                }
            fprintf(out, "; peak activations: predicted %.2f MB (device %d), measured %.2f MB "
                    "(device %d)", p_peak / 1e6, p_dev, m_peak / 1e6, dev);
        }
        fputc('\n', out);
    }
    viz_times_free(&tp);
    viz_times_free(&tm);
    return 0;
}
