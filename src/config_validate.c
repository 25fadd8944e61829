/* Checks that span several keys, which no key's range can say: errors
 * (n_heads divides d_model, lr_min <= lr) and notes for settings that are
 * allowed but likely a slip. Apart from the loaders because a caller that
 * applies a config file and then --set validates the result once. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "catchat/config.h"

int cc_config_validate(const cc_config *c, const char *origin)
{
    if (c->d_model % c->n_heads != 0)
        return cc_error("%s: [model] n_heads = %d does not divide d_model = %d", origin, c->n_heads,
                        c->d_model);
    if (c->lr_min > c->lr)
        return cc_error("%s: [train] lr = %g is below lr_min = %g: the schedule decays from lr to lr_min, "
                        "so set lr_min <= lr", origin, c->lr, c->lr_min);
    return 0;
}

int cc_config_notes(const cc_config *c, int training)
{
    int n = 0;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (strcmp(c->device, "gpu") != 0 && cores > 0 && c->threads > cores) {
        fprintf(stderr, "catchat: note: [run] threads = %d is more than the %ld cores of this machine: the CPU "
                        "reference's threads will share cores and run slower (0 = all cores)\n", c->threads, cores);
        n++;
    }
    if (training && c->warmup_steps >= c->max_steps) {
        fprintf(stderr, "catchat: note: [train] warmup_steps = %ld is not below max_steps = %ld: the whole run is "
                        "warmup, the learning rate %s and never decays to lr_min\n", c->warmup_steps, c->max_steps,
                c->warmup_steps > c->max_steps ? "never reaches lr" : "reaches lr at the last step");
        n++;
    }
    return n;
}
