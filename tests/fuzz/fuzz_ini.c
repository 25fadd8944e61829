/* libFuzzer harness: the INI config reader (inih + catchat's key table).
 * Beyond "no crash" it checks (abort() is the finding) that a config that
 * loads converts to JSON (the form a checkpoint stores) and back as the same
 * config, key by key, whatever its bytes: a path that is not UTF-8 goes to
 * the JSON as its bytes in hex. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/util.h"

/* Every key of every section holds the same value in a and b. */
static int same_config(const cc_config *a, const cc_config *b)
{
    const char *section, *key, *def, *help, *last = "";
    char diff[256];
    for (int i = 0; cc_config_key_info(i, &section, &key, &def, &help); last = section, i++)
        if (strcmp(section, last) != 0 && cc_config_section_diff(a, b, section, diff, sizeof(diff)) != 0) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    cc_error_quiet = 1;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    cc_config c;
    cc_config_defaults(&c);
    if (cc_config_load_string(&c, text, "fuzz.ini") == 0) {
        char *js = cc_config_to_json(&c);
        if (!js) abort();
        cc_config d;
        cc_config_defaults(&d);
        if (cc_config_from_json(&d, js, "fuzz.json") != 0) abort();
        if (!same_config(&c, &d)) abort();
        free(js);
    }
    free(text);
    return 0;
}
