/*
 * gen_registry.c: the generator registry (gen_lookup) and the CLI
 * defaults (gen_params_default) of gen.h.  The parameter checks every
 * handcrafted generator runs first are gen_common.c's (gen_begin); this
 * file calls the generators and nothing calls back into it.
 *
 * The generators themselves live one family per file:
 *   gen_gpipe.c        GPipe: all F, then all BW
 *   gen_1f1b.c         1F1B, ZB-H1 and ZB-H2 (one rule with a W delay)
 *   gen_interleaved.c  Megatron's interleaved 1F1B
 *   gen_zb_v.c         ZB-V, the handcrafted V-shape zero-bubble order
 *   gen_interleaved_zb.c  interleaved zero bubble (PyTorch's ZB-1p over v chunks)
 *
 * Parameters come straight from the command line, so every check here is
 * a zb_err, never an assert.
 */
#include "schedules/gen.h"

#include <string.h>

void gen_params_default(gen_params *p)
{
    memset(p, 0, sizeof *p);
    p->stages = 4;
    p->microbatches = 8;
    p->chunks = 1;
    p->t_f = p->t_b = p->t_w = 1;
    p->t_comm = 0;
    p->m_f = 2;
    p->m_b = -1;
    p->m_w = -1;
}

/* One registry row: a kind's CLI name and its generator. */
typedef struct gen_entry {
    const char *kind; /* as typed after `zbsched gen` */
    gen_fn fn;        /* the generator */
} gen_entry;

static const gen_entry gen_table[] = {
    { "gpipe", gen_gpipe },
    { "1f1b", gen_1f1b },
    { "interleaved", gen_interleaved },
    { "zb-h1", gen_zb_h1 },
    { "zb-h2", gen_zb_h2 },
    { "zb-v", gen_zb_v },
    { "interleaved-zb", gen_interleaved_zb },
};

gen_fn gen_lookup(const char *kind)
{
    if (!kind)
        return NULL;
    for (size_t i = 0; i < sizeof gen_table / sizeof gen_table[0]; i++)
        if (strcmp(gen_table[i].kind, kind) == 0)
            return gen_table[i].fn;
    return NULL;
}
