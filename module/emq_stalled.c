/* emq_stalled.c -- reference twin of trafikey's EMQ.STALLED.CHECK
 * (docs/keyspace.md#what-a-sweep-does, docs/sweeping.md#the-verb-exactly).
 *
 * A test and benchmark anchor, not a replacement for trafikey. The verb
 * selects expired leases from the active zset, judges every member before
 * writing anything, then moves each one to pending or dead. It replicates
 * its effects (ZREM / HSET / ZADD / HINCRBY), never itself: a replica has
 * another run_id and another clock.
 *
 * Every key handle is closed as soon as its job is done: the write pass
 * opens the same key under several names when the caller aliases them, and
 * a stale handle to a key that a write deleted must never be touched. */
#include <limits.h>
#include <string.h>

#include "module_api.h"

#define WRONGTYPE_ERR "WRONGTYPE Operation against a key holding the wrong kind of value"
#define NOT_INTEGER_ERR "ERR hash value is not an integer"
#define OVERFLOW_ERR "ERR increment or decrement would overflow"

enum { ARG_ACTIVE = 1, ARG_PENDING, ARG_DEAD, ARG_PREFIX, ARG_MAX_STALLED, ARG_LIMIT, ARGC };

typedef enum { GHOST, EXEMPT, RECOVERED, DEAD } Verdict;

typedef struct {
    RedisModuleString *id;
    RedisModuleString *row; /* <prefix>job:<id> */
    long long stalled;      /* the value to write: counted members only */
    Verdict verdict;
} Member;

typedef struct {
    RedisModuleString **argv;
    Member *members;
    size_t len, cap;
    size_t recovered; /* exempt and recovered: the ones that go to pending */
    size_t dead;
    long long failed; /* metrics:failed count before the call */
} Plan;

/* The server's run_id: fixed for the life of the process, read once. */
static char epoch[64];
static size_t epoch_len;

/* Reads a strictly formatted integer >= 1 (Redis' string2ll rules). */
static int parse_positive(RedisModuleString *arg, long long *out) {
    return RedisModule_StringToLongLong(arg, out) == REDISMODULE_OK && *out >= 1;
}

/* Caches the run_id from INFO server on the first call. */
static int load_epoch(RedisModuleCtx *ctx) {
    if (epoch_len) return REDISMODULE_OK;
    RedisModuleServerInfoData *info = RedisModule_GetServerInfo(ctx, "server");
    const char *run_id = info ? RedisModule_ServerInfoGetFieldC(info, "run_id") : NULL;
    size_t len = run_id ? strlen(run_id) : 0;
    if (len > 0 && len < sizeof(epoch)) {
        memcpy(epoch, run_id, len);
        epoch_len = len;
    }
    if (info) RedisModule_FreeServerInfo(ctx, info);
    return epoch_len ? REDISMODULE_OK : REDISMODULE_ERR;
}

/* True when `name` is missing or holds a value of `type`. */
static int key_is_type_or_missing(RedisModuleCtx *ctx, RedisModuleString *name, int type) {
    RedisModuleKey *key = RedisModule_OpenKey(ctx, name, REDISMODULE_READ);
    int found = RedisModule_KeyType(key);
    if (key) RedisModule_CloseKey(key);
    return found == REDISMODULE_KEYTYPE_EMPTY || found == type;
}

/* Joins three byte ranges into a NUL-terminated pool buffer (binary safe). */
static char *join3(RedisModuleCtx *ctx, const char *a, size_t alen, const char *b, size_t blen,
                   const char *c, size_t clen) {
    char *buf = RedisModule_PoolAlloc(ctx, alen + blen + clen + 1);
    memcpy(buf, a, alen);
    memcpy(buf + alen, b, blen);
    memcpy(buf + alen + blen, c, clen);
    buf[alen + blen + clen] = '\0';
    return buf;
}

/* Names a key under the queue prefix: <prefix><name><tail>. */
static RedisModuleString *prefixed(RedisModuleCtx *ctx, Plan *plan, const char *name,
                                   RedisModuleString *tail) {
    size_t plen, tlen = 0, nlen = strlen(name);
    const char *prefix = RedisModule_StringPtrLen(plan->argv[ARG_PREFIX], &plen);
    const char *tptr = tail ? RedisModule_StringPtrLen(tail, &tlen) : "";
    char *buf = join3(ctx, prefix, plen, name, nlen, tptr, tlen);
    return RedisModule_CreateString(ctx, buf, plen + nlen + tlen);
}

/* Appends one selected id to the plan, growing its pool-backed array. */
static void plan_push(RedisModuleCtx *ctx, Plan *plan, RedisModuleString *id) {
    if (plan->len == plan->cap) {
        size_t cap = plan->cap ? plan->cap * 2 : 64;
        Member *grown = RedisModule_PoolAlloc(ctx, cap * sizeof(Member));
        if (plan->len) memcpy(grown, plan->members, plan->len * sizeof(Member));
        plan->members = grown;
        plan->cap = cap;
    }
    Member *m = &plan->members[plan->len++];
    memset(m, 0, sizeof(*m));
    m->id = id;
}

/* ZRANGEBYSCORE active -inf now LIMIT 0 limit, into the plan. */
static void select_expired(RedisModuleCtx *ctx, Plan *plan, long long limit) {
    double now = (double)RedisModule_Milliseconds();
    RedisModuleKey *active = RedisModule_OpenKey(ctx, plan->argv[ARG_ACTIVE], REDISMODULE_READ);
    if (!active) return;
    if (RedisModule_ZsetFirstInScoreRange(active, REDISMODULE_NEGATIVE_INFINITE, now, 0, 0) ==
        REDISMODULE_OK) {
        while (!RedisModule_ZsetRangeEndReached(active) && (long long)plan->len < limit) {
            plan_push(ctx, plan, RedisModule_ZsetRangeCurrentElement(active, NULL));
            RedisModule_ZsetRangeNext(active);
        }
        RedisModule_ZsetRangeStop(active);
    }
    RedisModule_CloseKey(active);
}

/* Reads `stalled` by HINCRBY's rule and sets s = stalled + 1.
 * Returns NULL or the error text to refuse the call with. */
static const char *next_stalled(RedisModuleString *value, long long *s) {
    long long stalled = 0;
    if (value && RedisModule_StringToLongLong(value, &stalled) != REDISMODULE_OK)
        return NOT_INTEGER_ERR;
    if (stalled == LLONG_MAX) return OVERFLOW_ERR;
    *s = stalled + 1;
    return NULL;
}

/* Replies with "<head><id><tail>" as an error, the id's bytes verbatim. */
static int reply_with_member_error(RedisModuleCtx *ctx, const char *head, Member *m,
                                   const char *tail) {
    size_t idlen;
    const char *id = RedisModule_StringPtrLen(m->id, &idlen);
    char *text = join3(ctx, head, strlen(head), id, idlen, tail, strlen(tail));
    return RedisModule_ReplyWithError(ctx, text);
}

/* True when the row's lease was granted by another server process. */
static int granted_elsewhere(RedisModuleString *lease_epoch) {
    size_t len;
    const char *ptr;
    if (!lease_epoch) return 0;
    ptr = RedisModule_StringPtrLen(lease_epoch, &len);
    return len != epoch_len || memcmp(ptr, epoch, len) != 0;
}

/* Reads the `stalled` field of an open row and judges a counted member. */
static const char *judge_counted(RedisModuleKey *row, Member *m, long long max_stalled) {
    RedisModuleString *stalled = NULL;
    RedisModule_HashGet(row, REDISMODULE_HASH_CFIELDS, "stalled", &stalled, NULL);
    const char *err = next_stalled(stalled, &m->stalled);
    if (!err) m->verdict = m->stalled >= max_stalled ? DEAD : RECOVERED;
    return err;
}

/* Read pass for one member: ghost, exempt, recovered or dead; on a refusal
 * the error is replied here and REDISMODULE_ERR returned. */
static int judge_member(RedisModuleCtx *ctx, Plan *plan, Member *m, long long max_stalled) {
    RedisModuleString *group = NULL, *lease_epoch = NULL;
    const char *err = NULL;
    m->row = prefixed(ctx, plan, "job:", m->id);
    RedisModuleKey *row = RedisModule_OpenKey(ctx, m->row, REDISMODULE_READ);
    int type = RedisModule_KeyType(row);
    if (type == REDISMODULE_KEYTYPE_HASH) {
        RedisModule_HashGet(row, REDISMODULE_HASH_CFIELDS, "group", &group, "lease_epoch",
                            &lease_epoch, NULL);
        if (!group && granted_elsewhere(lease_epoch))
            m->verdict = EXEMPT;
        else if (!group)
            err = judge_counted(row, m, max_stalled);
    }
    if (row) RedisModule_CloseKey(row);
    if (type == REDISMODULE_KEYTYPE_EMPTY) return m->verdict = GHOST, REDISMODULE_OK;
    if (type != REDISMODULE_KEYTYPE_HASH)
        return reply_with_member_error(ctx, "WRONGTYPE job ", m, " is not a hash"), REDISMODULE_ERR;
    if (group)
        return reply_with_member_error(ctx, "EMQLANE job ", m, " is a lane row"), REDISMODULE_ERR;
    if (err) return RedisModule_ReplyWithError(ctx, err), REDISMODULE_ERR;
    if (m->verdict == DEAD) plan->dead++;
    else plan->recovered++;
    return REDISMODULE_OK;
}

/* Step 7: every key the plan writes must hold the right type, and the
 * metric must have room for the dead. Replies on refusal. */
static int check_targets(RedisModuleCtx *ctx, Plan *plan, RedisModuleString *metrics) {
    if (plan->recovered && !key_is_type_or_missing(ctx, plan->argv[ARG_PENDING],
                                                   REDISMODULE_KEYTYPE_ZSET))
        return RedisModule_ReplyWithError(ctx, WRONGTYPE_ERR), REDISMODULE_ERR;
    if (!plan->dead) return REDISMODULE_OK;
    if (!key_is_type_or_missing(ctx, plan->argv[ARG_DEAD], REDISMODULE_KEYTYPE_ZSET) ||
        !key_is_type_or_missing(ctx, metrics, REDISMODULE_KEYTYPE_HASH))
        return RedisModule_ReplyWithError(ctx, WRONGTYPE_ERR), REDISMODULE_ERR;
    RedisModuleKey *key = RedisModule_OpenKey(ctx, metrics, REDISMODULE_READ);
    RedisModuleString *count = NULL;
    if (key) RedisModule_HashGet(key, REDISMODULE_HASH_CFIELDS, "count", &count, NULL);
    if (key) RedisModule_CloseKey(key);
    plan->failed = 0;
    if (count && RedisModule_StringToLongLong(count, &plan->failed) != REDISMODULE_OK)
        return RedisModule_ReplyWithError(ctx, NOT_INTEGER_ERR), REDISMODULE_ERR;
    if (plan->failed > LLONG_MAX - (long long)plan->dead)
        return RedisModule_ReplyWithError(ctx, OVERFLOW_ERR), REDISMODULE_ERR;
    return REDISMODULE_OK;
}

/* Strings every write pass uses, created once at load time. */
static RedisModuleString *str_zero, *str_pending, *str_dead, *str_stalled;

/* ZREM active <every selected id>, ghosts included, with ZREM's events. */
static void remove_from_active(RedisModuleCtx *ctx, Plan *plan) {
    RedisModuleString *name = plan->argv[ARG_ACTIVE];
    RedisModuleString **ids = RedisModule_PoolAlloc(ctx, plan->len * sizeof(*ids));
    RedisModuleKey *active = RedisModule_OpenKey(ctx, name, REDISMODULE_WRITE);
    for (size_t i = 0; i < plan->len; i++) {
        ids[i] = plan->members[i].id;
        RedisModule_ZsetRem(active, ids[i], NULL);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zrem", name);
    }
    int emptied = RedisModule_KeyType(active) == REDISMODULE_KEYTYPE_EMPTY;
    RedisModule_CloseKey(active);
    if (emptied) RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC, "del", name);
    RedisModule_Replicate(ctx, "ZREM", "sv", name, ids, plan->len);
}

/* HSET on one judged row: the fields its verdict writes, and nothing else. */
static void update_row(RedisModuleCtx *ctx, Member *m) {
    RedisModuleKey *row = RedisModule_OpenKey(ctx, m->row, REDISMODULE_WRITE);
    RedisModuleString *s = m->verdict == EXEMPT ? NULL
                                                : RedisModule_CreateStringFromLongLong(ctx, m->stalled);
    int cf = REDISMODULE_HASH_CFIELDS;
    switch (m->verdict) {
    case EXEMPT:
        RedisModule_HashSet(row, cf, "state", str_pending, NULL);
        RedisModule_Replicate(ctx, "HSET", "scs", m->row, "state", str_pending);
        break;
    case RECOVERED:
        RedisModule_HashSet(row, cf, "stalled", s, "state", str_pending, NULL);
        RedisModule_Replicate(ctx, "HSET", "scscs", m->row, "stalled", s, "state", str_pending);
        break;
    default:
        RedisModule_HashSet(row, cf, "stalled", s, "state", str_dead, "last_error", str_stalled,
                            NULL);
        RedisModule_Replicate(ctx, "HSET", "scscscs", m->row, "stalled", s, "state", str_dead,
                              "last_error", str_stalled);
    }
    RedisModule_CloseKey(row);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_HASH, "hset", m->row);
}

/* ZADD <pending or dead> 0 id … for the members bound there, with events. */
static void add_with_score_zero(RedisModuleCtx *ctx, Plan *plan, int arg, int dead) {
    RedisModuleString *name = plan->argv[arg];
    size_t n = 0, want = dead ? plan->dead : plan->recovered;
    if (!want) return;
    RedisModuleString **pairs = RedisModule_PoolAlloc(ctx, 2 * want * sizeof(*pairs));
    RedisModuleKey *key = RedisModule_OpenKey(ctx, name, REDISMODULE_WRITE);
    for (size_t i = 0; i < plan->len; i++) {
        Member *m = &plan->members[i];
        if (m->verdict == GHOST || (m->verdict == DEAD) != dead) continue;
        RedisModule_ZsetAdd(key, 0, m->id, NULL);
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_ZSET, "zadd", name);
        pairs[n++] = str_zero;
        pairs[n++] = m->id;
    }
    RedisModule_CloseKey(key);
    RedisModule_Replicate(ctx, "ZADD", "sv", name, pairs, n);
}

/* HINCRBY <prefix>metrics:failed count <dead>: one event per death. */
static void count_failed(RedisModuleCtx *ctx, Plan *plan, RedisModuleString *metrics) {
    if (!plan->dead) return;
    RedisModuleString *count = RedisModule_CreateStringFromLongLong(ctx, plan->failed + (long long)plan->dead);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, metrics, REDISMODULE_WRITE);
    RedisModule_HashSet(key, REDISMODULE_HASH_CFIELDS, "count", count, NULL);
    RedisModule_CloseKey(key);
    for (size_t i = 0; i < plan->dead; i++)
        RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_HASH, "hincrby", metrics);
    RedisModule_Replicate(ctx, "HINCRBY", "scl", metrics, "count", (long long)plan->dead);
}

/* Write pass. Grouped by key in the order the effects replicate, so the
 * primary runs exactly what its replicas and the AOF replay. */
static void write_plan(RedisModuleCtx *ctx, Plan *plan, RedisModuleString *metrics) {
    remove_from_active(ctx, plan);
    for (size_t i = 0; i < plan->len; i++)
        if (plan->members[i].verdict != GHOST) update_row(ctx, &plan->members[i]);
    add_with_score_zero(ctx, plan, ARG_PENDING, 0);
    add_with_score_zero(ctx, plan, ARG_DEAD, 1);
    count_failed(ctx, plan, metrics);
}

/* Replies with the ids of one side ([recovered] or [dead]) in selection order. */
static void reply_ids(RedisModuleCtx *ctx, Plan *plan, int dead) {
    RedisModule_ReplyWithArray(ctx, (long)(dead ? plan->dead : plan->recovered));
    for (size_t i = 0; i < plan->len; i++) {
        Member *m = &plan->members[i];
        if (m->verdict != GHOST && (m->verdict == DEAD) == dead)
            RedisModule_ReplyWithString(ctx, m->id);
    }
}

/* Replies [[recovered ids], [dead ids]]; ghosts are listed nowhere. */
static int reply_plan(RedisModuleCtx *ctx, Plan *plan) {
    RedisModule_ReplyWithArray(ctx, 2);
    reply_ids(ctx, plan, 0);
    reply_ids(ctx, plan, 1);
    return REDISMODULE_OK;
}

/* EMQ.STALLED.CHECK <active> <pending> <dead> <prefix> <max_stalled> <limit>
 * Returns up to <limit> expired leases of <active> to <pending>, or to <dead>
 * once their stall budget is spent; a lease granted by another server process
 * (another run_id) goes back uncounted. Replies with [[recovered ids], [dead ids]].
 * Any refusal is an error reply and writes nothing. */
static int StalledCheck_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    long long max_stalled, limit;
    if (argc != ARGC) return RedisModule_WrongArity(ctx);
    RedisModule_AutoMemory(ctx);
    if (!parse_positive(argv[ARG_MAX_STALLED], &max_stalled))
        return RedisModule_ReplyWithError(ctx, "ERR max_stalled must be a positive integer");
    if (!parse_positive(argv[ARG_LIMIT], &limit))
        return RedisModule_ReplyWithError(ctx, "ERR limit must be a positive integer");
    if (!key_is_type_or_missing(ctx, argv[ARG_ACTIVE], REDISMODULE_KEYTYPE_ZSET))
        return RedisModule_ReplyWithError(ctx, WRONGTYPE_ERR);
    if (load_epoch(ctx) != REDISMODULE_OK)
        return RedisModule_ReplyWithError(ctx, "ERR cannot read the server's run_id");
    Plan plan = {.argv = argv};
    select_expired(ctx, &plan, limit);
    for (size_t i = 0; i < plan.len; i++)
        if (judge_member(ctx, &plan, &plan.members[i], max_stalled) != REDISMODULE_OK)
            return REDISMODULE_OK;
    if (plan.len == 0) return reply_plan(ctx, &plan);
    RedisModuleString *metrics = prefixed(ctx, &plan, "metrics:failed", NULL);
    if (check_targets(ctx, &plan, metrics) != REDISMODULE_OK) return REDISMODULE_OK;
    write_plan(ctx, &plan, metrics);
    return reply_plan(ctx, &plan);
}

/* True when INFO server names the server Valkey (server_name:valkey); Redis has
 * no server_name field. */
static int server_is_valkey(RedisModuleCtx *ctx) {
    RedisModuleServerInfoData *info = RedisModule_GetServerInfo(ctx, "server");
    const char *name = info ? RedisModule_ServerInfoGetFieldC(info, "server_name") : NULL;
    int valkey = name && strcmp(name, "valkey") == 0;
    if (info) RedisModule_FreeServerInfo(ctx, info);
    return valkey;
}

/* Valkey 9's atomic slot migration (CLUSTER MIGRATESLOTS) is refused while a
 * loaded module has not declared that it handles it. This module may:
 * - What moves. The source streams the slot's keys to the target as plain
 *   commands, then every write to the slot until cut-over. The module has no
 *   data type of its own (nothing of it to serialize) and replicates the verb's
 *   effects (ZREM, HSET, ZADD, HINCRBY), never the verb: the target applies the
 *   source's result exactly and never runs the verb on another clock or run_id.
 *   A queue's keys, job rows and metrics:failed included, share one hash tag,
 *   so a call's effects all belong to the moving slot and move together.
 * - Before cut-over the source owns the slot and keeps every key of it, so a
 *   call there sees the whole queue (a SETSLOT MIGRATING reshard, by contrast,
 *   moves rows one by one). The target hides the importing keys and redirects
 *   commands for them; the module touches no key of its own accord (no
 *   keyspace-event subscription, timer or server event), so nothing of it
 *   runs against the half-imported copy.
 * - At cut-over the source pauses writes until the target has caught up, the
 *   target takes the slot and the source drops its copy: a call (a write
 *   command) runs whole before the pause, its effects streamed, or after it on
 *   the target; never on both, never half.
 * - The only state kept outside the keyspace is the cached run_id, this
 *   process's own: the target compares leases with its own run_id, so leases
 *   granted on the source come back exempt there (a migrated slot is a new
 *   server process for its leases: docs/keyspace.md#in-a-cluster-and-after-a-failover). */
static void declare_slot_migration_safe(RedisModuleCtx *ctx) {
    if (server_is_valkey(ctx))
        RedisModule_SetModuleOptions(ctx, VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "emqref", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    declare_slot_migration_safe(ctx);
    str_zero = RedisModule_CreateString(NULL, "0", 1);
    str_pending = RedisModule_CreateString(NULL, "pending", 7);
    str_dead = RedisModule_CreateString(NULL, "dead", 4);
    str_stalled = RedisModule_CreateString(NULL, "stalled", 7);
    if (!str_zero || !str_pending || !str_dead || !str_stalled) return REDISMODULE_ERR;
    if (RedisModule_CreateCommand(ctx, "emq.stalled.check", StalledCheck_RedisCommand,
                                  "write deny-oom", 1, 3, 1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
