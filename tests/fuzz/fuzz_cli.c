/* libFuzzer harness: command-line values: --set key=value and the strict
 * numeric option parsers, one argument per input line. Beyond "no crash" it
 * checks (abort() is the finding) that a number a parser accepts lies in the
 * range it was given, and is finite for cli_parse_double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/util.h"
#include "cli/cli.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    cc_config c;
    cc_config_defaults(&c);
    cli_config_args ca = { 0 };
    char *save = NULL;
    for (char *arg = strtok_r(text, "\n", &save); arg; arg = strtok_r(NULL, "\n", &save)) {
        long l;
        double d;
        unsigned long long u;
        cc_config_set_arg(&c, arg);
        if (cli_parse_long("--x", arg, -1000000, 1000000, &l) == 0 && (l < -1000000 || l > 1000000)) abort();
        if (cli_parse_double("--x", arg, -1e30, 1e30, &d) == 0 && !(isfinite(d) && d >= -1e30 && d <= 1e30))
            abort();
        cli_parse_u64("--x", arg, &u);
        cli_add_set(&ca, arg);
    }
    cc_config_validate(&c, "fuzz");
    free(text);
    return 0;
}
