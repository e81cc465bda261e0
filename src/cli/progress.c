/*
 * progress.c: the live status line on stderr (progress.h).
 */
#include "src/cli/progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Redraw at most this often, and not before this much time has passed. */
#define PROGRESS_PERIOD_S 0.1
#define PROGRESS_DELAY_S 0.5

static double since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

void cli_progress_init(cli_progress *p, int quiet)
{
    memset(p, 0, sizeof *p);
    p->on = !quiet && isatty(STDERR_FILENO);
    p->last_draw = -1;
    clock_gettime(CLOCK_MONOTONIC, &p->start);
}

/* Draws "what[: tail]" when due (force: whenever a line is already shown,
 * so a final state is never lost). */
static void draw(cli_progress *p, const char *tail, int force)
{
    if (!p->on)
        return;
    double t = since(&p->start);
    if (!(force && p->shown)) {
        if (t < PROGRESS_DELAY_S)
            return;
        if (p->last_draw >= 0 && t - p->last_draw < PROGRESS_PERIOD_S)
            return;
    }
    fprintf(stderr, "\r%s%s%s\033[K", p->what, tail && tail[0] && p->what[0] ? ": " : "",
            tail ? tail : "");
    fflush(stderr);
    p->last_draw = t;
    p->shown = 1;
}

void cli_progress_what(cli_progress *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->what, sizeof p->what, fmt, ap);
    va_end(ap);
    draw(p, NULL, 0);
}

void cli_progress_solver(void *ctx, const solver_progress *sp)
{
    cli_progress *p = ctx;
    if (!p->on)
        return;
    char tail[160];
    snprintf(tail, sizeof tail, "%.1f/%.4g s, incumbent %.6g, bound %.6g, gap %.2f%%%s",
             sp->elapsed_s, sp->time_limit_s, sp->incumbent, sp->bound,
             100 * solver_progress_gap(sp), sp->done ? " (done)" : "");
    draw(p, tail, sp->done);
}

void cli_progress_search_count(void *ctx, int done, int total)
{
    cli_progress *p = ctx;
    if (!p->on)
        return;
    /* keep an ILP stage note after the count */
    char *semi = strchr(p->what, ';');
    char rest[128] = "";
    if (semi)
        snprintf(rest, sizeof rest, "%s", semi);
    char now[128];
    snprintf(now, sizeof now, "search %d/%d candidates%s", done, total, rest);
    memcpy(p->what, now, sizeof p->what);
    draw(p, NULL, 0);
}

void cli_progress_search_stage(void *ctx, const char *what)
{
    cli_progress *p = ctx;
    if (!p->on)
        return;
    char *semi = strchr(p->what, ';');
    if (semi)
        *semi = '\0';
    size_t n = strlen(p->what);
    snprintf(p->what + n, sizeof p->what - n, "; %s", what);
    draw(p, NULL, 0);
}

void cli_progress_end(cli_progress *p)
{
    if (p->on && p->shown)
        fputc('\n', stderr);
    p->shown = 0;
}
