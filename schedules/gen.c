/* gen.c: placeholder until the generators land; every kind fails cleanly. */
#include "schedules/gen.h"

#include <string.h>

void gen_params_default(gen_params *p)
{
    memset(p, 0, sizeof *p);
    p->stages = 4;
    p->microbatches = 8;
    p->chunks = 1;
    p->t_f = p->t_b = p->t_w = 1;
    p->m_f = 2;
    p->m_b = -1;
    p->m_w = -1;
}

gen_fn gen_lookup(const char *kind)
{
    (void)kind;
    return NULL;
}
