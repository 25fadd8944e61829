/* One run at a time in an out_dir: an exclusive flock(2) on <out_dir>/catchat.lock,
 * held for the whole run and released by the kernel when the process ends,
 * however it ends (a crash, SIGKILL, a node going down with a local disk). The
 * file holds who has it (pid, host, start time) for the refusal's message. */
#ifndef CATCHAT_RUN_LOCK_H
#define CATCHAT_RUN_LOCK_H

#define CC_RUN_LOCK_NAME "catchat.lock"

typedef struct cc_run_lock {
    int fd;             /* the open lock file, -1 when none is held */
    int made_dir;       /* the folder did not exist: removed again if the run leaves nothing in it */
    char dir[1024];
} cc_run_lock;

/* Create out_dir if needed and take its lock. 0 held (or the file system
 * cannot lock: said in a note, the run goes on unguarded); -1 another process
 * holds it (one line naming its pid, host and start time) or the folder
 * cannot be made. */
int cc_run_lock_take(cc_run_lock *lk, const char *out_dir);
/* Let go (idempotent). A folder the lock created and the run left empty is
 * removed, so a run refused before writing leaves nothing behind. */
void cc_run_lock_release(cc_run_lock *lk);

#endif
