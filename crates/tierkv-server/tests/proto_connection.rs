//! Connection and introspection commands: PING, ECHO, SELECT, QUIT, CLIENT, HELLO,
//! COMMAND, INFO, CONFIG GET, and the reply to an unknown command.

mod common;

use redis::{Value, cmd};

#[test]
fn ping_echo_select() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    assert_eq!(
        cmd("PING").query::<Value>(&mut c).unwrap(),
        Value::SimpleString("PONG".into())
    );
    assert_eq!(cmd("PING").arg("hi").query::<String>(&mut c).unwrap(), "hi");
    assert_eq!(
        cmd("ECHO")
            .arg(b"a\r\nb".as_slice())
            .query::<Vec<u8>>(&mut c)
            .unwrap(),
        b"a\r\nb"
    );
    assert_eq!(
        cmd("SELECT").arg(0).query::<Value>(&mut c).unwrap(),
        Value::Okay
    );
    assert_eq!(
        common::error_of(&mut c, cmd("SELECT").arg(16)),
        "ERR DB index is out of range"
    );
    assert_eq!(
        common::error_of(&mut c, cmd("SELECT").arg("x")),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        common::error_of(&mut c, cmd("PING").arg("a").arg("b")),
        "ERR wrong number of arguments for 'ping' command"
    );
}

#[test]
fn unknown_command_is_answered_and_the_connection_stays() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let e = common::error_of(&mut c, cmd("FLY").arg("me").arg("to the moon"));
    assert_eq!(
        e,
        "ERR unknown command 'FLY', with args beginning with: 'me' 'to the moon' "
    );
    let e = common::error_of(&mut c, &cmd("NOPE"));
    assert_eq!(e, "ERR unknown command 'NOPE', with args beginning with: ");
    let long = "x".repeat(300);
    let e = common::error_of(&mut c, cmd("NOPE").arg(&long).arg("more"));
    assert!(e.len() < 200, "arguments are cut at 128 characters: {e}");
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    let e = common::error_of(&mut c, cmd("CLIENT").arg("FLY"));
    assert_eq!(e, "ERR unknown subcommand 'FLY'. Try CLIENT HELP.");
    let e = common::error_of(&mut c, cmd("CLIENT").arg("KILL"));
    assert_eq!(e, "ERR wrong number of arguments for 'client|kill' command");
}

#[test]
fn client_id_and_names() {
    let srv = common::start("dram:btree");
    let mut a = srv.client();
    let mut b = srv.client();
    let ida: i64 = cmd("CLIENT").arg("ID").query(&mut a).unwrap();
    let idb: i64 = cmd("CLIENT").arg("ID").query(&mut b).unwrap();
    assert!(ida > 0 && idb > 0 && ida != idb);
    assert_eq!(
        cmd("CLIENT")
            .arg("GETNAME")
            .query::<Option<String>>(&mut a)
            .unwrap(),
        None
    );
    assert_eq!(
        cmd("CLIENT")
            .arg("SETNAME")
            .arg("worker-1")
            .query::<Value>(&mut a)
            .unwrap(),
        Value::Okay
    );
    assert_eq!(
        cmd("CLIENT")
            .arg("GETNAME")
            .query::<String>(&mut a)
            .unwrap(),
        "worker-1"
    );
    assert_eq!(
        cmd("CLIENT")
            .arg("GETNAME")
            .query::<Option<String>>(&mut b)
            .unwrap(),
        None
    );
    let e = common::error_of(&mut a, cmd("CLIENT").arg("SETNAME").arg("a b"));
    assert!(e.contains("cannot contain spaces"), "{e}");
    let ok: Value = cmd("CLIENT")
        .arg("SETINFO")
        .arg("LIB-NAME")
        .arg("mine")
        .query(&mut a)
        .unwrap();
    assert_eq!(ok, Value::Okay);
}

#[test]
fn hello_switches_protocol_and_describes_the_server() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let v: Value = cmd("HELLO")
        .arg(3)
        .arg("SETNAME")
        .arg("h3")
        .query(&mut c)
        .unwrap();
    let Value::Map(fields) = v else {
        panic!("HELLO 3 answers a map, got {v:?}")
    };
    let get = |k: &str| {
        fields
            .iter()
            .find(|(f, _)| *f == Value::BulkString(k.as_bytes().to_vec()))
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(get("proto"), Value::Int(3));
    assert_eq!(get("server"), Value::BulkString(b"tierkv".to_vec()));
    assert_eq!(
        cmd("CLIENT")
            .arg("GETNAME")
            .query::<String>(&mut c)
            .unwrap(),
        "h3"
    );
    assert_eq!(
        common::error_of(&mut c, cmd("HELLO").arg(4)),
        "NOPROTO unsupported protocol version"
    );
    let e = common::error_of(&mut c, cmd("HELLO").arg(3).arg("BOGUS"));
    assert_eq!(e, "ERR Syntax error in HELLO option 'BOGUS'");
    // The redis crate's own RESP3 handshake works too.
    let mut r3 = srv.client_resp3();
    assert_eq!(
        cmd("GET").arg("none").query::<Value>(&mut r3).unwrap(),
        Value::Nil
    );
}

#[test]
fn quit_answers_ok_then_closes() {
    let srv = common::start("dram:btree");
    let mut s = srv.raw();
    let got = common::exchange(&mut s, b"QUIT\r\n", |_| false);
    assert_eq!(got, b"+OK\r\n");
}

#[test]
fn command_and_command_docs_describe_every_command() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let n: i64 = cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    let all: Vec<Value> = cmd("COMMAND").query(&mut c).unwrap();
    assert_eq!(all.len() as i64, n);
    let info: Vec<Value> = cmd("COMMAND")
        .arg("INFO")
        .arg("get")
        .arg("nosuch")
        .query(&mut c)
        .unwrap();
    let Value::Array(get) = &info[0] else {
        panic!("{info:?}")
    };
    assert_eq!(get[0], Value::BulkString(b"get".to_vec()));
    assert_eq!(get[1], Value::Int(2));
    assert_eq!(
        (get[3].clone(), get[4].clone(), get[5].clone()),
        (Value::Int(1), Value::Int(1), Value::Int(1))
    );
    assert_eq!(info[1], Value::Nil);
    let docs: Value = cmd("COMMAND").arg("DOCS").arg("set").query(&mut c).unwrap();
    let flat = format!("{docs:?}");
    assert!(
        flat.contains("summary") && flat.contains("since") && flat.contains("group"),
        "{flat}"
    );
    let names: Vec<String> = cmd("COMMAND").arg("LIST").query(&mut c).unwrap();
    for want in [
        "ping", "echo", "hello", "auth", "select", "quit", "client", "command", "info", "dbsize",
        "get", "set", "setnx", "getset", "mget", "mset", "del", "exists", "incr", "incrby", "decr",
        "decrby", "append", "strlen", "hset", "hmset", "hget", "hmget", "hgetall", "hdel",
        "hexists", "hlen", "scan",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from COMMAND LIST"
        );
    }
}

#[test]
fn info_has_redis_sections_and_the_engine_counters() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    redis::Commands::set::<_, _, ()>(&mut c, "k", "v").unwrap();
    let info: String = cmd("INFO").query(&mut c).unwrap();
    for want in [
        "# Server\r\n",
        "redis_version:",
        "# Clients\r\nconnected_clients:1\r\n",
        "# Memory\r\n",
        "# Stats\r\n",
        "total_commands_processed:",
        "# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n",
        "# tierkv\r\nengine:dram:btree\r\n",
        "durability:none: the dram engine keeps everything in DRAM",
        "user_bytes_written:2\r\n",
        "keys:1\r\n",
    ] {
        assert!(info.contains(want), "INFO lacks {want:?}:\n{info}");
    }
    let only: String = cmd("INFO").arg("tierkv").query(&mut c).unwrap();
    assert!(
        only.starts_with("# tierkv") && !only.contains("# Server"),
        "{only}"
    );
    // RESP3 clients get a verbatim string.
    let mut r3 = srv.client_resp3();
    let v: Value = cmd("INFO").arg("server").query(&mut r3).unwrap();
    assert!(matches!(v, Value::VerbatimString { .. }), "{v:?}");
}

/// CONFIG GET answers; CONFIG SET changes `maxclients`, keeps the Redis settings that have
/// no effect here (checked as Redis checks them), accepts a fixed setting only at the value
/// it has, and applies nothing of a command with one bad pair.
#[test]
fn config_get_answers_and_config_set_changes_what_can_change() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let get = |c: &mut redis::Connection, p: &str| -> std::collections::HashMap<String, String> {
        cmd("CONFIG").arg("GET").arg(p).query(c).unwrap()
    };
    let v = get(&mut c, "max*");
    assert_eq!(v.get("maxclients").map(String::as_str), Some("10000"));
    assert_eq!(v.get("maxmemory").map(String::as_str), Some("0"));
    assert_eq!(
        v.get("maxmemory-policy").map(String::as_str),
        Some("noeviction")
    );
    assert_eq!(
        get(&mut c, "save").get("save").map(String::as_str),
        Some("")
    );
    assert_eq!(
        get(&mut c, "appendonly")
            .get("appendonly")
            .map(String::as_str),
        Some("no")
    );
    // What test fixtures send: accepted.
    for (p, v) in [
        ("save", ""),
        ("appendonly", "no"),
        ("maxmemory-policy", "allkeys-LRU"),
    ] {
        let r: String = cmd("CONFIG")
            .arg("SET")
            .arg(p)
            .arg(v)
            .query(&mut c)
            .unwrap();
        assert_eq!(r, "OK", "{p}");
    }
    let r: String = cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("100mb")
        .arg("notify-keyspace-events")
        .arg("KEA")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, "OK");
    let v = get(&mut c, "*");
    assert_eq!(
        v.get("maxmemory-policy").map(String::as_str),
        Some("allkeys-lru")
    );
    assert_eq!(v.get("maxmemory").map(String::as_str), Some("104857600"));
    assert_eq!(
        v.get("notify-keyspace-events").map(String::as_str),
        Some("KEA")
    );
    for (args, why) in [
        (&["appendonly", "yes"][..], "can't set immutable config"),
        (&["databases", "32"][..], "can't set immutable config"),
        (&["hz", "often"][..], "couldn't be parsed into an integer"),
        (&["maxmemory-policy", "lru"][..], "must be one of"),
        (&["no-such-setting", "1"][..], "Unknown option"),
        (&["hz"][..], "wrong number of arguments"),
        (&["maxclients", "5", "hz", "x"][..], "couldn't be parsed"),
    ] {
        refused(&mut c, &["CONFIG", "SET"], args, why);
    }
    // The last command had a good pair first: nothing of it was applied.
    assert_eq!(
        get(&mut c, "maxclients")
            .get("maxclients")
            .map(String::as_str),
        Some("10000")
    );
    // maxclients takes effect for the next connection.
    let r: String = cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg("1")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, "OK");
    let mut other = srv.raw();
    let got = common::read_until(&mut other, |_| false);
    assert_eq!(got, b"-ERR max number of clients reached\r\n");
    let r: String = cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg("10")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, "OK");
    let mut again = srv.client();
    assert_eq!(cmd("PING").query::<String>(&mut again).unwrap(), "PONG");
}

/// Sends `head` + `args` and checks the error names `why`.
fn refused(c: &mut redis::Connection, head: &[&str], args: &[&str], why: &str) {
    let mut command = cmd(head[0]);
    for a in head[1..].iter().chain(args) {
        command.arg(*a);
    }
    let e = common::error_of(c, &command);
    assert!(e.contains(why), "{head:?} {args:?}: {e}");
}

/// The `addr=` field of a client's `CLIENT INFO` line.
#[allow(
    clippy::unwrap_used,
    reason = "test helper: a failure here is a test failure"
)]
fn own_addr(c: &mut redis::Connection) -> String {
    let info: String = cmd("CLIENT").arg("INFO").query(c).unwrap();
    info.split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap()
        .to_owned()
}

/// True once `c`'s connection is closed by the server (a PING fails).
fn is_closed(c: &mut redis::Connection) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if cmd("PING").query::<String>(c).is_err() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// CLIENT KILL in both forms: by ID, by ADDR, SKIPME, a client blocked in BLPOP closed at
/// once, and Redis's errors.
#[test]
fn client_kill_closes_the_clients_it_names() {
    let srv = common::start("dram:btree");
    let mut a = srv.client();
    let mut b = srv.client();
    let b_id: i64 = cmd("CLIENT").arg("ID").query(&mut b).unwrap();
    let n: i64 = cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(b_id)
        .query(&mut a)
        .unwrap();
    assert_eq!(n, 1);
    assert!(is_closed(&mut b), "killed by ID, still served");
    // The old form, by address: +OK, then "No such client".
    let mut c = srv.client();
    let c_addr = own_addr(&mut c);
    let ok: String = cmd("CLIENT")
        .arg("KILL")
        .arg(&c_addr)
        .query(&mut a)
        .unwrap();
    assert_eq!(ok, "OK");
    assert!(is_closed(&mut c));
    let e = common::error_of(&mut a, cmd("CLIENT").arg("KILL").arg(&c_addr));
    assert!(e.contains("No such client"), "{e}");
    // A client blocked without a timeout is closed at once.
    let mut d = srv.client();
    let d_addr = own_addr(&mut d);
    let blocked = std::thread::spawn(move || {
        cmd("BLPOP")
            .arg("nothing")
            .arg(0)
            .query::<redis::Value>(&mut d)
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    let n: i64 = cmd("CLIENT")
        .arg("KILL")
        .arg("ADDR")
        .arg(&d_addr)
        .query(&mut a)
        .unwrap();
    assert_eq!(n, 1);
    assert!(
        blocked.join().unwrap().is_err(),
        "BLPOP answered on a killed connection"
    );
    // SKIPME: by default the caller is spared; with SKIPME no it is closed after the reply.
    let a_addr = own_addr(&mut a);
    let n: i64 = cmd("CLIENT")
        .arg("KILL")
        .arg("ADDR")
        .arg(&a_addr)
        .query(&mut a)
        .unwrap();
    assert_eq!(n, 0);
    for (args, why) in [
        (&["ID", "0"][..], "client-id should be greater than 0"),
        (&["TYPE", "robot"][..], "Unknown client type"),
        (&["USER", "bob"][..], "No such user"),
        (&["ID", "1", "SKIPME"][..], "syntax error"),
        (&["ID", "1", "SKIPME", "maybe"][..], "syntax error"),
    ] {
        refused(&mut a, &["CLIENT", "KILL"], args, why);
    }
    let n: i64 = cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut a)
        .unwrap();
    assert_eq!(n, 0);
    let n: i64 = cmd("CLIENT")
        .arg("KILL")
        .arg("ADDR")
        .arg(&a_addr)
        .arg("SKIPME")
        .arg("no")
        .query(&mut a)
        .unwrap();
    assert_eq!(n, 1);
    assert!(is_closed(&mut a));
    let mut e = srv.client();
    assert_eq!(cmd("PING").query::<String>(&mut e).unwrap(), "PONG");
}
