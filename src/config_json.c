/* The config as JSON, the form a checkpoint stores it in, and back. A stored
 * config is a record rather than the user's input, so reading it back is
 * more lenient than the INI reader: a key of a newer catchat that does not
 * shape the model is passed over, an old spelling read as today's. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include "catchat/version.h"
#include "config_impl.h"

/* A path as JSON: a string where it is UTF-8, else {"hex": "<its bytes>"}
 * (JSON strings hold only UTF-8; the bytes are kept whatever they are). */
static json_t *path_to_json(const char *path)
{
    json_t *v = json_string(path);
    if (v) return v;
    char hex[2 * CC_PATH_MAX + 1];
    cc_hex_encode(path, hex, sizeof(hex));
    return json_pack("{s:s}", "hex", hex);
}

/* The path of a {"hex": "..."} object into buf; -1 if val is not one. */
static int path_from_hex(const json_t *val, char *buf, size_t cap)
{
    const json_t *h = json_object_get(val, "hex");
    const char *hex = json_is_string(h) && json_object_size(val) == 1 ? json_string_value(h) : NULL;
    return hex ? cc_hex_decode(hex, buf, cap) : -1;
}

char *cc_config_to_json(const cc_config *c)
{
    json_t *root = json_object();
    char buf[CC_PATH_MAX + 8];
    for (int i = 0; i < config_nkeys; i++) {
        const key_spec *k = &config_keys[i];
        json_t *sec = json_object_get(root, k->section);
        if (!sec) {
            sec = json_object();
            json_object_set_new(root, k->section, sec);
        }
        const char *base = (const char *)c + k->offset;
        json_t *v;
        switch (k->type) {
        case K_INT: v = json_integer(*(const int *)base); break;
        case K_LONG: v = json_integer(*(const long *)base); break;
        case K_REAL: v = json_real(*(const double *)base); break;
        case K_SCALE:
            v = c->loss_scale_dynamic ? json_string("dynamic") : json_real(c->loss_scale);
            break;
        case K_PATH: v = path_to_json(base); break;
        default: config_value_text(c, k, buf, sizeof(buf)); v = json_string(buf); break;
        }
        /* a key left out would read back as its default: a stored config holds every key or none */
        if (!v || json_object_set_new(sec, k->key, v) != 0) {
            json_decref(root);
            cc_error("the config cannot be written as JSON ([%s] %s)", k->section, k->key);
            return NULL;
        }
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(root);
    return s;
}

/* A stored value as the text cc_config_set takes (k NULL for a key this
 * catchat does not know); -1 for a JSON type that no key of its kind has. */
static int stored_text(const key_spec *k, const json_t *val, char *buf, size_t cap)
{
    if (json_is_object(val) && k && k->type == K_PATH) return path_from_hex(val, buf, CC_PATH_MAX);
    if (json_is_string(val)) snprintf(buf, cap, "%s", json_string_value(val));
    else if (json_is_integer(val)) snprintf(buf, cap, "%lld", (long long)json_integer_value(val));
    else if (json_is_real(val)) cc_format_real(buf, cap, json_real_value(val));
    else return -1;
    return 0;
}

int cc_config_from_json(cc_config *c, const char *json, const char *origin)
{
    json_error_t err;
    json_t *root = json_loads(json, 0, &err);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return cc_error("%s: config is not a JSON object (%s)", origin, err.text);
    }
    int rc = 0;
    const char *sname, *kname;
    json_t *sec, *val;
    json_object_foreach(root, sname, sec) {
        if (!json_is_object(sec)) { rc = cc_error("%s: config section '%s' is not an object", origin, sname); break; }
        json_object_foreach(sec, kname, val) {
            char buf[CC_PATH_MAX + 8];
            const key_spec *k = config_find_key(sname, kname);
            if ((rc = stored_text(k, val, buf, sizeof(buf))) != 0) {
                cc_error("%s: config key %s.%s %s", origin, sname, kname,
                         k && k->type == K_PATH ? "is neither a string nor {\"hex\": \"<the path's bytes in hex>\"}"
                                                : "has an unsupported JSON type");
                break;
            }
            /* a stored config is a record, not the user's input: a key of a newer catchat that does not
             * shape the model is passed over with a note, and an old spelling is read as today's */
            if (!k && strcmp(sname, "model") != 0) {
                fprintf(stderr, "catchat: note: %s: stored config key [%s] %s is not known to this catchat (%s): "
                                "passed over\n", origin, sname, kname, cc_version());
                continue;
            }
            if (strcmp(sname, "gpu") == 0 && strcmp(kname, "recurrence") == 0 && strcmp(buf, "stepwise") == 0)
                snprintf(buf, sizeof(buf), "per-step");
            if ((rc = cc_config_set(c, sname, kname, buf, origin)) != 0) break;
            if (k && k->type == K_PATH)
                snprintf((char *)c + config_from_offset(k), CC_ORIGIN_MAX, "the [%s] %s stored in %s", sname, kname,
                         origin);
        }
        if (rc) break;
    }
    json_decref(root);
    return rc ? rc : cc_config_validate(c, origin);
}
