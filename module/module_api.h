/* module_api.h -- the part of the Valkey/Redis module ABI that emq_stalled.c uses.
 *
 * Written for this project from the module API's documented contract: the
 * server hands OnLoad a context whose first pointer is the GetApi function,
 * and every other API function is fetched by name ("RedisModule_<Name>")
 * through it. Only the functions, types and constants the module calls are
 * declared here. The module is one translation unit, so the pointers are
 * static. */
#ifndef EMQ_MODULE_API_H
#define EMQ_MODULE_API_H

#include <stddef.h>
#include <stdint.h>

#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1

/* OpenKey modes. */
#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)

/* KeyType results. */
#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_KEYTYPE_HASH 3
#define REDISMODULE_KEYTYPE_ZSET 5

/* HashGet / HashSet flags: field names passed as C strings. */
#define REDISMODULE_HASH_CFIELDS (1 << 2)

/* Keyspace notification classes. */
#define REDISMODULE_NOTIFY_GENERIC (1 << 2)
#define REDISMODULE_NOTIFY_HASH (1 << 6)
#define REDISMODULE_NOTIFY_ZSET (1 << 7)

#define REDISMODULE_NEGATIVE_INFINITE (-1.0 / 0.0)

/* SetModuleOptions: the module handles Valkey's atomic slot migration (Valkey 9's
 * CLUSTER MIGRATESLOTS). A Valkey option: Redis may give this bit another meaning,
 * so it is set only on a server that says it is Valkey. */
#define VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION (1 << 5)

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleServerInfoData RedisModuleServerInfoData;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* X(return type, name without the RedisModule_ prefix, parameter list) */
#define EMQ_MODULE_API(X)                                                                  \
    X(int, IsModuleNameBusy, (const char *name))                                           \
    X(void, SetModuleAttribs, (RedisModuleCtx *ctx, const char *name, int ver, int apiver)) \
    X(void, SetModuleOptions, (RedisModuleCtx *ctx, int options))                          \
    X(int, CreateCommand,                                                                  \
      (RedisModuleCtx *ctx, const char *name, RedisModuleCmdFunc fn, const char *flags,    \
       int firstkey, int lastkey, int keystep))                                            \
    X(void, AutoMemory, (RedisModuleCtx *ctx))                                             \
    X(void *, PoolAlloc, (RedisModuleCtx *ctx, size_t bytes))                              \
    X(int, WrongArity, (RedisModuleCtx *ctx))                                              \
    X(int, ReplyWithError, (RedisModuleCtx *ctx, const char *err))                         \
    X(int, ReplyWithArray, (RedisModuleCtx *ctx, long len))                                \
    X(int, ReplyWithString, (RedisModuleCtx *ctx, RedisModuleString *str))                 \
    X(RedisModuleString *, CreateString, (RedisModuleCtx *ctx, const char *ptr, size_t len)) \
    X(RedisModuleString *, CreateStringFromLongLong, (RedisModuleCtx *ctx, long long ll))  \
    X(const char *, StringPtrLen, (const RedisModuleString *str, size_t *len))             \
    X(int, StringToLongLong, (const RedisModuleString *str, long long *ll))                \
    X(long long, Milliseconds, (void))                                                     \
    X(RedisModuleKey *, OpenKey, (RedisModuleCtx *ctx, RedisModuleString *name, int mode)) \
    X(void, CloseKey, (RedisModuleKey *key))                                               \
    X(int, KeyType, (RedisModuleKey *key))                                                 \
    X(int, ZsetFirstInScoreRange,                                                          \
      (RedisModuleKey *key, double min, double max, int minex, int maxex))                 \
    X(RedisModuleString *, ZsetRangeCurrentElement, (RedisModuleKey *key, double *score))  \
    X(int, ZsetRangeNext, (RedisModuleKey *key))                                           \
    X(int, ZsetRangeEndReached, (RedisModuleKey *key))                                     \
    X(void, ZsetRangeStop, (RedisModuleKey *key))                                          \
    X(int, ZsetAdd, (RedisModuleKey *key, double score, RedisModuleString *ele, int *flags)) \
    X(int, ZsetRem, (RedisModuleKey *key, RedisModuleString *ele, int *deleted))           \
    X(int, HashGet, (RedisModuleKey *key, int flags, ...))                                 \
    X(int, HashSet, (RedisModuleKey *key, int flags, ...))                                 \
    X(int, Replicate, (RedisModuleCtx *ctx, const char *cmdname, const char *fmt, ...))    \
    X(int, NotifyKeyspaceEvent,                                                            \
      (RedisModuleCtx *ctx, int type, const char *event, RedisModuleString *key))          \
    X(RedisModuleServerInfoData *, GetServerInfo, (RedisModuleCtx *ctx, const char *section)) \
    X(const char *, ServerInfoGetFieldC, (RedisModuleServerInfoData *data, const char *field)) \
    X(void, FreeServerInfo, (RedisModuleCtx *ctx, RedisModuleServerInfoData *data))

#define EMQ_DECLARE_API(ret, name, params) static ret(*RedisModule_##name) params;
EMQ_MODULE_API(EMQ_DECLARE_API)
#undef EMQ_DECLARE_API

static int (*RedisModule_GetApi)(const char *name, void *target);

/* Fetches every declared function, then registers the module as `name`.
 * Fails when the server lacks a function or the name is taken. */
static int RedisModule_Init(RedisModuleCtx *ctx, const char *name, int ver, int apiver) {
    void *getapi = ((void **)ctx)[0];
    RedisModule_GetApi = (int (*)(const char *, void *))(uintptr_t)getapi;
#define EMQ_FETCH_API(ret, fn, params)                                                     \
    if (RedisModule_GetApi("RedisModule_" #fn, (void *)&RedisModule_##fn) != REDISMODULE_OK) \
        return REDISMODULE_ERR;
    EMQ_MODULE_API(EMQ_FETCH_API)
#undef EMQ_FETCH_API
    if (RedisModule_IsModuleNameBusy(name)) return REDISMODULE_ERR;
    RedisModule_SetModuleAttribs(ctx, name, ver, apiver);
    return REDISMODULE_OK;
}

#endif /* EMQ_MODULE_API_H */
