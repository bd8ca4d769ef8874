/* c_echo: a worker-host plugin in plain C, without the Rust SDK or any libc, to show that
 * plugin ABI v1 (SPEC section 4) is language-neutral. Built by scripts/build-plugins.sh with
 *   clang --target=wasm32 -nostdlib -O2 -c c_echo.c && wasm-ld --no-entry --export=...
 *
 * It logs each message (original routing key, size, the start of the body) and fails an empty
 * body. If the message has an `echo-to` header it publishes the body again with that routing key
 * to the exchange named by the `echo-exchange` header (default "master"); a refused publish
 * retries the message. */

#define IMPORT(name) __attribute__((import_module("worker_v1"), import_name(name)))
#define EXPORT(name) __attribute__((export_name(name)))

IMPORT("body_len") int body_len(void);
IMPORT("body_read") int body_read(char *ptr, int len);
IMPORT("meta_get") int meta_get(const char *key, int key_len, char *buf, int buf_cap);
IMPORT("log") void host_log(int level, const char *ptr, int len);
IMPORT("set_reason") void set_reason(const char *ptr, int len);
IMPORT("publish") int publish(const char *ex, int ex_len, const char *key, int key_len,
                              const char *body, int body_len, long long delay_ms);

enum { OK = 0, RETRY = 1, FAIL = 2, INFO = 2 };

static char body[64 * 1024];
static char key[256], echo_to[256], exchange[256], line[512];

static int str_len(const char *s) {
    int n = 0;
    while (s[n]) n++;
    return n;
}

/* A meta value into buf (NUL-terminated); its length, or -1 if absent or too long. */
static int meta(const char *name, char *buf, int cap) {
    int n = meta_get(name, str_len(name), buf, cap - 1);
    if (n < 0 || n > cap - 1) return -1;
    buf[n] = 0;
    return n;
}

/* Appends src[0..n) to line at *at, clipped to the buffer. */
static void append(int *at, const char *src, int n) {
    for (int i = 0; i < n && *at < (int)sizeof line; i++) line[(*at)++] = src[i];
}

static void append_int(int *at, int v) {
    char digits[12];
    int n = 0;
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v > 0);
    while (n > 0) append(at, &digits[--n], 1);
}

static int answer(int code, const char *reason) {
    set_reason(reason, str_len(reason));
    return code;
}

EXPORT("worker_abi_v1") void worker_abi_v1(void) {}

EXPORT("worker_handle") int worker_handle(void) {
    int len = body_len();
    if (len <= 0) return answer(FAIL, "c_echo: empty body");
    if (len > (int)sizeof body) return answer(FAIL, "c_echo: body larger than 64 KiB");
    len = body_read(body, len);

    if (meta("original-routing-key", key, sizeof key) < 0) key[0] = 0;
    int at = 0;
    append(&at, "c_echo: ", 8);
    append(&at, key, str_len(key));
    append(&at, " ", 1);
    append_int(&at, len);
    append(&at, " bytes: ", 8);
    append(&at, body, len < 200 ? len : 200);
    host_log(INFO, line, at);

    int to_len = meta("header:echo-to", echo_to, sizeof echo_to);
    if (to_len <= 0) return OK;
    if (meta("header:echo-exchange", exchange, sizeof exchange) < 0) {
        const char *dflt = "master";
        for (int i = 0; i <= 6; i++) exchange[i] = dflt[i];
    }
    int rc = publish(exchange, str_len(exchange), echo_to, to_len, body, len, 0);
    if (rc < 0) {
        at = 0;
        append(&at, "c_echo: publish refused, code -", 31);
        append_int(&at, -rc);
        set_reason(line, at);
        return RETRY;
    }
    return OK;
}
