/* libFuzzer harness: the INI config reader (inih + catchat's key table). */
#include <stdlib.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/util.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    cc_config c;
    cc_config_defaults(&c);
    if (cc_config_load_string(&c, text, "fuzz.ini") == 0) {
        /* a config that loads must also survive the round trips it takes later */
        char *js = cc_config_to_json(&c);
        cc_config d;
        cc_config_defaults(&d);
        if (cc_config_from_json(&d, js, "fuzz.json") != 0) abort();
        free(js);
    }
    free(text);
    return 0;
}
