/*
 * rank.c: the rank variables of rank.h.  Strict parsing: a variable that
 * is set but is not a plain decimal number is an error, not 0, because a
 * rank that silently became 0 would wait forever for a peer that also
 * thinks it is rank 0.
 */
#include "runtime/rank.h"

#include <errno.h>
#include <stdlib.h>

/* The first set, non-empty variable of names[], or NULL. */
static const char *first_env(const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return v;
    }
    return NULL;
}

/* Parses text as an int in [min, 2^20]; 0, or -1 with err naming name. */
static int parse_env_int(const char *name, const char *text, int min, int *out, zb_err *err)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno || v < min || v > 1 << 20)
        return zb_fail(err, "%s='%s' is not a valid number", name, text);
    *out = (int)v;
    return 0;
}

int zb_rank_from_env(zb_rank_info *r, zb_err *err)
{
    static const char *const rank_names[] = { "ZB_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                              "SLURM_PROCID", NULL };
    static const char *const world_names[] = { "ZB_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                                               "PMI_SIZE", "SLURM_NTASKS", NULL };
    static const char *const local_names[] = { "ZB_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                               "MPI_LOCALRANKID", "SLURM_LOCALID", NULL };
    r->rank = 0;
    r->world = 1;
    r->local_rank = 0;
    const char *rs = first_env(rank_names), *ws = first_env(world_names);
    const char *ls = first_env(local_names);
    if (!rs && !ws)
        return 0;
    if (!rs || !ws)
        return zb_fail(err, "multi-process run: set both ZB_RANK and ZB_WORLD_SIZE");
    if (parse_env_int("ZB_RANK", rs, 0, &r->rank, err) != 0 ||
        parse_env_int("ZB_WORLD_SIZE", ws, 1, &r->world, err) != 0)
        return -1;
    if (ls && parse_env_int("ZB_LOCAL_RANK", ls, 0, &r->local_rank, err) != 0)
        return -1;
    if (!ls)
        r->local_rank = r->rank;
    if (r->rank >= r->world)
        return zb_fail(err, "ZB_RANK %d is not below ZB_WORLD_SIZE %d", r->rank, r->world);
    return 1;
}
