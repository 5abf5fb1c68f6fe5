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
    let e = common::error_of(&mut c, cmd("CLIENT").arg("KILL"));
    assert_eq!(e, "ERR unknown subcommand 'KILL'. Try CLIENT HELP.");
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

#[test]
fn config_get_answers_and_config_set_is_refused() {
    let srv = common::start("dram:btree");
    let mut c = srv.client();
    let v: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .arg("max*")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["maxclients", "10000", "save", ""]);
    let v: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, ["appendonly", "no"]);
    let e = common::error_of(&mut c, cmd("CONFIG").arg("SET").arg("save").arg(""));
    assert!(e.starts_with("ERR CONFIG SET is not supported"), "{e}");
}
