"""Application-style checks with redis-py against `tierkv serve` (run by tests/redis_py.rs).

Usage: python app_tests.py HOST PORT. Exits non-zero on the first failed check.
"""

import sys
import threading
import time

import redis

host, port = sys.argv[1], int(sys.argv[2])
r = redis.Redis(host=host, port=port, decode_responses=True)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


# 1. A transactional pipeline (redis-py wraps it in MULTI/EXEC by default).
pipe = r.pipeline()
res = pipe.set("a", 1).incr("a").set("b", "x").execute()
check(res == [True, 2, True], f"pipeline results {res}")

# 2. A queuing error aborts the whole transaction: nothing is applied, the client raises.
pipe = r.pipeline()
pipe.set("c", 1)
pipe.execute_command("SET", "d")  # wrong number of arguments: refused while queuing
try:
    pipe.execute()
    check(False, "a transaction with a queuing error must raise")
except redis.exceptions.ResponseError as e:
    check("EXECABORT" in str(e) or "wrong number" in str(e), f"error {e}")
check(r.exists("c", "d") == 0, "an aborted transaction applied writes")

# 3. A runtime error inside EXEC does not stop the other commands.
pipe = r.pipeline()
pipe.set("s", "text").incr("s").set("t", 1)
res = pipe.execute(raise_on_error=False)
check(res[0] is True and isinstance(res[1], redis.exceptions.ResponseError) and res[2] is True,
      f"runtime error results {res}")
check(r.get("t") == "1", "the command after a runtime error ran")

# 4. WATCH retry loop (redis-py's transaction helper) from several threads.
r.set("counter", 0)


def bump(times):
    c = redis.Redis(host=host, port=port, decode_responses=True)
    for _ in range(times):
        def incr(p):
            v = int(p.get("counter"))
            p.multi()
            p.set("counter", v + 1)
        c.transaction(incr, "counter")


threads = [threading.Thread(target=bump, args=(50,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(r.get("counter") == "200", f"WATCH loop lost increments: {r.get('counter')}")

# 5. A TTL-based cache (cache-aside).
def slow_lookup(key):
    return f"value-of-{key}"


def cached(key, ttl_ms):
    v = r.get(f"cache:{key}")
    if v is None:
        v = slow_lookup(key)
        r.set(f"cache:{key}", v, px=ttl_ms)
        return v, False
    return v, True


check(cached("x", 300) == ("value-of-x", False), "first lookup misses")
check(cached("x", 300) == ("value-of-x", True), "second lookup hits")
check(0 < r.pttl("cache:x") <= 300, f"pttl {r.pttl('cache:x')}")
time.sleep(0.4)
check(r.get("cache:x") is None, "an expired cache entry is gone")
check(cached("x", 300)[1] is False, "an expired entry misses")
r.setex("session:1", 100, "alice")
check(r.ttl("session:1") in (99, 100), f"ttl {r.ttl('session:1')}")
check(r.getex("session:1", persist=True) == "alice", "getex")
check(r.ttl("session:1") == -1, "persist through getex")
check(r.expire("session:1", 50, gt=True) is False, "GT against no TTL refuses")
check(r.expire("session:1", 50) is True, "expire")

# 6. A simple lock with SET NX PX.
check(r.set("lock:job", "me", nx=True, px=5000) is True, "lock taken")
check(r.set("lock:job", "you", nx=True, px=5000) is None, "lock held")
check(r.delete("lock:job") == 1, "lock released")

# 7. Hash usage: counters per field.
r.hset("stats", mapping={"views": 1, "name": "page"})
check(r.hincrby("stats", "views", 9) == 10, "hincrby")
check(r.hgetall("stats") == {"views": "10", "name": "page"}, f"hgetall {r.hgetall('stats')}")
check(sorted(r.hkeys("stats")) == ["name", "views"], "hkeys")
check(dict(r.hscan_iter("stats")) == {"views": "10", "name": "page"}, "hscan_iter")

# 8. Keyspace helpers.
check(set(r.keys("cache:*")) == {"cache:x"}, f"keys {r.keys('cache:*')}")
check(r.rename("stats", "stats2") is True, "rename")
check(r.copy("stats2", "stats3") is True, "copy")
check(r.flushdb() is True and r.dbsize() == 0, "flushdb")

# 9. An argument over the store's value limit (1 MiB by default) is an error reply; the
# connection stays open (same client id after), and nothing was stored.
cid = r.client_id()
try:
    r.set("huge", "x" * (2 << 20))
    check(False, "an over-long argument must raise")
except redis.exceptions.ResponseError as e:
    check("too long" in str(e), f"error {e}")
check(r.client_id() == cid, "the connection was closed after an over-long argument")
check(r.exists("huge") == 0, "an over-long argument was stored")

# 10. A job queue on BLPOP: workers block on the queue, a producer pushes jobs, every job
# is taken exactly once; a worker gives up after its timeout when the queue stays empty.
done = []
done_lock = threading.Lock()


def worker():
    c = redis.Redis(host=host, port=port, decode_responses=True)
    while True:
        item = c.blpop(["jobs:high", "jobs:low"], timeout=1)
        if item is None:
            return
        queue, job = item
        if job == "stop":
            return
        with done_lock:
            done.append((queue, job))


workers = [threading.Thread(target=worker) for _ in range(3)]
for w in workers:
    w.start()
time.sleep(0.2)
for i in range(60):
    r.rpush("jobs:high" if i % 3 == 0 else "jobs:low", f"job{i}")
for _ in workers:
    r.rpush("jobs:low", "stop")
for w in workers:
    w.join(timeout=20)
check(all(not w.is_alive() for w in workers), "workers still blocked")
check(sorted(j for _, j in done) == sorted(f"job{i}" for i in range(60)),
      f"jobs taken exactly once: {len(done)}")
check(all((q == "jobs:high") == (int(j[3:]) % 3 == 0) for q, j in done), "queue names")
t = time.time()
check(r.blpop("jobs:none", timeout=0.3) is None, "an empty queue times out")
check(time.time() - t >= 0.25, "the timeout was waited")
# A reliable queue: BLMOVE to a processing list, then LREM when done.
r.rpush("rq", "a", "b")
check(r.blmove("rq", "rq:processing", 1, "LEFT", "RIGHT") == "a", "blmove")
check(r.lrange("rq:processing", 0, -1) == ["a"], "processing list")
check(r.lrem("rq:processing", 1, "a") == 1, "lrem when done")

# 11. A leaderboard on a sorted set.
players = {f"p{i}": (i * 37) % 101 for i in range(50)}
r.zadd("board", players)
top = r.zrevrange("board", 0, 4, withscores=True)
check([m for m, _ in top] == [m for m, _ in sorted(players.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:5]],
      f"top 5 {top}")
check([s for _, s in top] == sorted(players.values(), reverse=True)[:5], "top scores")
check(r.zincrby("board", 100, "p3") == players["p3"] + 100, "zincrby")
check(r.zrevrank("board", "p3") == 0, "p3 leads")
check(r.zscore("board", "p3") == players["p3"] + 100, "zscore")
check(r.zcount("board", 50, "+inf") == sum(1 for p, s in players.items() if s >= 50 or p == "p3"),
      "zcount")
check(r.zadd("board", {"p3": 1}, gt=True) == 0 and r.zscore("board", "p3") == players["p3"] + 100,
      "GT keeps the best score")
page = r.zrange("board", 100, 200, byscore=True, offset=0, num=3, withscores=True)
check(len(page) <= 3 and all(100 <= s <= 200 for _, s in page), f"byscore page {page}")
check(r.zpopmin("board")[0][1] == min(players.values()), "zpopmin")
check(r.zcard("board") == 49, "zcard")

# 12. Sets for tags, and a client configured with db=3.
r.sadd("tags:a", "x", "y", "z")
r.sadd("tags:b", "y", "z", "w")
check(r.sinter("tags:a", "tags:b") == {"y", "z"}, "sinter")
check(r.sunionstore("tags:all", "tags:a", "tags:b") == 4, "sunionstore")
r3 = redis.Redis(host=host, port=port, db=3, decode_responses=True)
r3.set("only-in-3", "v")
check(r.get("only-in-3") is None and r3.get("only-in-3") == "v", "db=3 is its own database")
check(r3.dbsize() == 1, "db 3 size")

print(f"redis-py {redis.__version__}: {checks} checks passed")
