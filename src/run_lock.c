/* The out_dir lock (run_lock.h). flock, not a pid file: the kernel drops it
 * with the process, so a killed run never leaves a stale lock to clear by hand. */
#define _DEFAULT_SOURCE
#include "catchat/run_lock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "catchat/util.h"

static void lock_path(const cc_run_lock *lk, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", lk->dir, CC_RUN_LOCK_NAME);
}

/* The holder's line as it wrote it ("pid 4242 on node7, started ..."), or a
 * word saying it is not known (a lock taken by a catchat that wrote nothing yet). */
static void read_holder(int fd, char *out, size_t cap)
{
    ssize_t n = pread(fd, out, cap - 1, 0);
    if (n <= 0) {
        snprintf(out, cap, "holder not known yet");
        return;
    }
    out[n] = 0;
    out[strcspn(out, "\n")] = 0;
}

static void write_holder(int fd)
{
    char host[256] = "?", when[64] = "?", line[512];
    if (gethostname(host, sizeof(host)) != 0) snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = 0;
    const time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    const int len = snprintf(line, sizeof(line), "pid %ld on %s, started %s\n", (long)getpid(), host, when);
    /* what is written is only for the message of a refused run: a failure here guards nothing less */
    if (ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)len, 0) == len) fsync(fd);
}

/* One attempt: 1 held (fd set), 0 the file was replaced or removed under us
 * (try again), -1 refused or failed (said). */
static int try_lock(cc_run_lock *lk, const char *path)
{
    struct stat st;
    if (cc_mkdir_p(lk->dir) != 0) return -1;
    if (stat(lk->dir, &st) != 0 || !S_ISDIR(st.st_mode)) /* mkdir takes a file of that name for the folder */
        return cc_error("[run] out_dir '%s' is a file, not a folder: choose another out_dir", lk->dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) return 0; /* the folder was removed between mkdir and open: again */
    if (fd < 0) return cc_error("cannot open the out_dir lock '%s': %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        if (err == EWOULDBLOCK) {
            char holder[400];
            read_holder(fd, holder, sizeof(holder));
            close(fd);
            return cc_error("%s is in use by another catchat run\n  %s\n  lock file %s\n"
                            "  wait for it to end, or choose another [run] out_dir", lk->dir, holder, path);
        }
        /* some network file systems refuse locks: the run is not worth losing over that */
        fprintf(stderr, "catchat: note: cannot lock %s (%s): another run started in this folder would not be "
                        "refused\n", path, strerror(err));
        close(fd);
        return 1;
    }
    /* a run that made the folder and wrote nothing removes the file (and the folder) while holding it: a lock
     * taken on that removed file guards nothing, so it must still be the file at the path */
    struct stat held;
    if (fstat(fd, &held) != 0 || stat(path, &st) != 0 || held.st_dev != st.st_dev || held.st_ino != st.st_ino) {
        close(fd);
        return 0;
    }
    lk->fd = fd;
    write_holder(fd);
    return 1;
}

int cc_run_lock_take(cc_run_lock *lk, const char *out_dir)
{
    memset(lk, 0, sizeof(*lk));
    lk->fd = -1;
    if (strlen(out_dir) >= sizeof(lk->dir)) return cc_error("out_dir path too long: '%s'", out_dir);
    snprintf(lk->dir, sizeof(lk->dir), "%s", out_dir);
    struct stat st;
    lk->made_dir = stat(out_dir, &st) != 0;
    char path[sizeof(lk->dir) + 32];
    lock_path(lk, path, sizeof(path));
    for (int attempt = 0; attempt < 100; attempt++) {
        const int got = try_lock(lk, path);
        if (got != 0) {
            if (got < 0) lk->dir[0] = 0;
            return got > 0 ? 0 : -1;
        }
    }
    lk->dir[0] = 0;
    return cc_error("cannot lock '%s': it is removed and made again as fast as it is locked", path);
}

/* 1 when dir holds nothing but the lock file. */
static int only_the_lock(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int others = 0;
    struct dirent *e;
    while (!others && (e = readdir(d)))
        others = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && strcmp(e->d_name, CC_RUN_LOCK_NAME) != 0;
    closedir(d);
    return !others;
}

void cc_run_lock_release(cc_run_lock *lk)
{
    if (!lk->dir[0]) return;
    /* a folder this run made and wrote nothing into goes again (unlinked while the lock is still held, so no
     * other run can be holding this file) */
    if (lk->made_dir && lk->fd >= 0 && only_the_lock(lk->dir)) {
        char path[sizeof(lk->dir) + 32];
        lock_path(lk, path, sizeof(path));
        if (unlink(path) == 0) rmdir(lk->dir);
    }
    if (lk->fd >= 0) close(lk->fd);
    lk->fd = -1;
    lk->dir[0] = 0;
}
