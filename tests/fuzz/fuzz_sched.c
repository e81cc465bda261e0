/*
 * fuzz_sched.c: libFuzzer target for everything that reads untrusted
 * schedule files: sched_load_string, then sched_validate, then (for valid
 * schedules) sim_run and sim_mem_curve, and a save/load round trip that
 * must reproduce the same text.  Built only with -Dfuzz=true and clang
 * (tests/fuzz/meson.build); run by tools/fuzz.sh with the seed corpus in
 * tests/fuzz/corpus/.
 *
 * Any crash, sanitizer report, leak or hang is a bug: the loader must turn
 * every input into either a schedule or one error line.
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/sched_io.h"
#include "src/sim.h"
#include "src/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sched_t *s = NULL;
    zb_err err = { "" };
    if (sched_load_string((const char *)data, size, &s, &err) != 0) {
        assert(err.msg[0] != '\0');
        return 0;
    }
    /* What was loaded writes back and reloads to the same text. */
    char *text = sched_to_string(s);
    if (text) {
        sched_t *t = NULL;
        if (sched_load_string(text, strlen(text), &t, &err) != 0)
            abort();
        char *again = sched_to_string(t);
        if (again && strcmp(text, again) != 0)
            abort();
        free(again);
        sched_free(t);
        free(text);
    }
    if (sched_validate(s, &err) == 0) {
        sim_result r;
        if (sim_run(s, &r, &err) != 0)
            abort(); /* a valid schedule always simulates */
        for (int d = 0; d < s->n_devices && d < 4; d++) {
            sim_mem_point *pt = NULL;
            int n = 0;
            if (sim_mem_curve(s, &r, d, &pt, &n, &err) == 0)
                free(pt);
        }
        sim_result_free(&r);
    } else {
        assert(err.msg[0] != '\0');
    }
    sched_free(s);
    return 0;
}
