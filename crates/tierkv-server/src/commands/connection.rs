//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, CLIENT
//! (ID, GETNAME, SETNAME, SETINFO, INFO, LIST, NO-EVICT, NO-TOUCH, HELP).
//!
//! Authentication follows Redis's `requirepass`: one password for the user `default`. Until
//! a client authenticates, only AUTH, HELLO (with its AUTH option) and QUIT run; the rest
//! get `NOAUTH` (see [`super::execute`]). Passwords are compared in time independent of
//! where they differ. HELLO switches the connection between RESP2 and RESP3; its reply is
//! already in the new protocol, as in Redis.
//!
//! Thread-safety: these handlers touch only the connection's own [`crate::shared::Session`]
//! and output; the shared state they read is immutable.

use super::{CmdError, CmdResult, Ctx, is, msg, parse_int, unknown_subcommand};
use crate::resp::{Args, Protocol};

/// The Redis version the server speaks the protocol of (what clients test features by).
pub(crate) const REDIS_COMPAT_VERSION: &str = "7.2.0";

fn wrong_arity(name: &str) -> CmdError {
    CmdError::new(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// PING [message]
pub(crate) fn ping(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    match args.len() {
        1 => ctx.out.simple("PONG"),
        2 => ctx.out.bulk(args.get(1)),
        _ => return Err(wrong_arity("ping")),
    }
    Ok(())
}

/// ECHO message
pub(crate) fn echo(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    ctx.out.bulk(args.get(1));
    Ok(())
}

/// Equality whose time does not depend on where the inputs differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks credentials and marks the session authenticated.
fn authenticate(ctx: &mut Ctx<'_>, user: Option<&[u8]>, pass: &[u8]) -> CmdResult {
    let default_user = user.is_none_or(|u| u == b"default");
    match &ctx.shared.config.requirepass {
        None if user.is_none() => Err(CmdError::new(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        )),
        // Without requirepass the default user takes any password, as in Redis.
        None if default_user => Ok(()),
        Some(pw) if default_user && same_secret(pass, pw.as_bytes()) => {
            ctx.session.authenticated = true;
            Ok(())
        }
        _ => Err(CmdError::new(msg::WRONGPASS)),
    }
}

/// AUTH [username] password
pub(crate) fn auth(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    match args.len() {
        2 => authenticate(ctx, None, args.get(1))?,
        3 => authenticate(ctx, Some(args.get(1)), args.get(2))?,
        _ => return Err(CmdError::new(msg::SYNTAX)),
    }
    ctx.out.ok();
    Ok(())
}

/// HELLO [protover [AUTH username password] [SETNAME clientname]]
pub(crate) fn hello(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let mut proto = ctx.out.protocol();
    if args.len() >= 2 {
        proto = match parse_int(args.get(1)) {
            Ok(2) => Protocol::Resp2,
            Ok(3) => Protocol::Resp3,
            Ok(_) => return Err(CmdError::new("NOPROTO unsupported protocol version")),
            Err(_) => {
                return Err(CmdError::new(
                    "ERR Protocol version is not an integer or out of range",
                ));
            }
        };
    }
    let mut name = None;
    let mut i = 2;
    while i < args.len() {
        let opt = args.get(i);
        if is(opt, "AUTH") && i + 2 < args.len() {
            authenticate(ctx, Some(args.get(i + 1)), args.get(i + 2))?;
            i += 3;
        } else if is(opt, "SETNAME") && i + 1 < args.len() {
            name = Some(valid_name(args.get(i + 1))?);
            i += 2;
        } else {
            return Err(CmdError::new(format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if !ctx.session.authenticated {
        return Err(CmdError::new(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time",
        ));
    }
    if let Some(n) = name {
        ctx.session.name = (!n.is_empty()).then(|| n.to_vec());
    }
    ctx.out.set_protocol(proto);
    ctx.shared.clients.sync(ctx.session, proto.version());
    hello_reply(ctx, proto);
    Ok(())
}

fn hello_reply(ctx: &mut Ctx<'_>, proto: Protocol) {
    let out = &mut *ctx.out;
    out.map(8);
    out.bulk(b"server");
    out.bulk(b"tierkv");
    out.bulk(b"version");
    out.bulk(REDIS_COMPAT_VERSION.as_bytes());
    out.bulk(b"tierkv_version");
    out.bulk(env!("CARGO_PKG_VERSION").as_bytes());
    out.bulk(b"proto");
    out.int(proto.version());
    out.bulk(b"id");
    out.int(i64::try_from(ctx.session.id).unwrap_or(i64::MAX));
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
}

/// SELECT index (0 to 15)
pub(crate) fn select(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    ctx.session.db = super::keys::db_index(args.get(1))?;
    let resp = ctx.out.protocol().version();
    ctx.shared.clients.sync(ctx.session, resp);
    ctx.out.ok();
    Ok(())
}

/// QUIT
pub(crate) fn quit(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    ctx.session.quit = true;
    ctx.out.ok();
    Ok(())
}

/// A client name or library attribute: printable ASCII without spaces (as Redis demands).
fn valid_name(name: &[u8]) -> Result<&[u8], CmdError> {
    if name.iter().all(|&b| (b'!'..=b'~').contains(&b)) {
        Ok(name)
    } else {
        Err(CmdError::new(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "SETINFO <LIB-NAME|LIB-VER> <value>",
    "    Set client meta attr. Options are:",
    "INFO",
    "    Return information about the current client connection.",
    "LIST",
    "    Return information about client connections.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are: ID <client-id>, ADDR <ip:port>, LADDR <ip:port>,",
    "    TYPE (NORMAL|MASTER|REPLICA|PUBSUB), USER <username>, SKIPME (YES|NO).",
    "NO-EVICT (ON|OFF)",
    "    Accepted; nothing is evicted here.",
    "NO-TOUCH (ON|OFF)",
    "    Accepted; there is no LRU here.",
    "HELP",
    "    Print this help.",
];

/// CLIENT ID | GETNAME | SETNAME name | SETINFO attr value | INFO | LIST | KILL ... |
/// NO-EVICT | NO-TOUCH | HELP
pub(crate) fn client(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let sub = args.get(1);
    let argc_ok = |n: usize, name: &str| {
        if args.len() == n {
            Ok(())
        } else {
            Err(wrong_arity(&format!("client|{name}")))
        }
    };
    if is(sub, "ID") {
        argc_ok(2, "id")?;
        ctx.out
            .int(i64::try_from(ctx.session.id).unwrap_or(i64::MAX));
    } else if is(sub, "GETNAME") {
        argc_ok(2, "getname")?;
        match &ctx.session.name {
            Some(n) => ctx.out.bulk(n),
            None => ctx.out.null(),
        }
    } else if is(sub, "SETNAME") {
        argc_ok(3, "setname")?;
        let n = valid_name(args.get(2))?;
        ctx.session.name = (!n.is_empty()).then(|| n.to_vec());
        sync_client(ctx);
        ctx.out.ok();
    } else if is(sub, "SETINFO") {
        argc_ok(4, "setinfo")?;
        set_info(ctx, args.get(2), args.get(3))?;
        sync_client(ctx);
        ctx.out.ok();
    } else if is(sub, "INFO") {
        argc_ok(2, "info")?;
        let line = client_line(ctx, "client|info");
        ctx.out.verbatim(line.as_bytes());
    } else if is(sub, "LIST") {
        let multi = ctx
            .session
            .tx
            .as_ref()
            .map_or(-1, |t| t.queued.len() as i64);
        let text = ctx
            .shared
            .clients
            .list(ctx.session.id, multi, "client|list");
        ctx.out.verbatim(text.as_bytes());
    } else if is(sub, "KILL") {
        client_kill(ctx, args)?;
    } else if is(sub, "NO-EVICT") || is(sub, "NO-TOUCH") {
        argc_ok(3, "no-evict")?;
        if !(is(args.get(2), "ON") || is(args.get(2), "OFF")) {
            return Err(CmdError::new(msg::SYNTAX));
        }
        ctx.out.ok();
    } else if is(sub, "HELP") {
        ctx.out.array(CLIENT_HELP.len());
        for line in CLIENT_HELP {
            ctx.out.simple(line);
        }
    } else {
        return Err(unknown_subcommand(sub, "CLIENT"));
    }
    Ok(())
}

/// CLIENT KILL ip:port | CLIENT KILL [ID id] [ADDR ip:port] [LADDR ip:port] [TYPE t]
/// [USER u] [SKIPME yes|no] — Redis 7.0's forms and replies (the old form answers +OK or
/// "No such client", the new one how many it killed; a killed client is closed once its
/// running burst is answered, at once when idle or blocked).
fn client_kill(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    use crate::clients::KillFilter;
    let text = |a: &[u8]| String::from_utf8_lossy(a).into_owned();
    if args.len() < 3 {
        return Err(wrong_arity("client|kill"));
    }
    if args.len() == 3 {
        let f = KillFilter {
            addr: Some(text(args.get(2))),
            ..KillFilter::default()
        };
        if ctx.shared.clients.kill(&f) == 0 {
            return Err(CmdError::new("ERR No such client"));
        }
        ctx.out.ok();
        return Ok(());
    }
    let mut f = KillFilter {
        skip: Some(ctx.session.id),
        ..KillFilter::default()
    };
    // TYPE other than normal, or USER other than default, selects nobody.
    let mut nobody = false;
    let mut i = 2;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Err(CmdError::new(msg::SYNTAX));
        }
        let (opt, v) = (args.get(i), args.get(i + 1));
        if is(opt, "ID") {
            let id = super::parse_i64_strict(v)
                .filter(|n| *n > 0)
                .ok_or_else(|| CmdError::new("ERR client-id should be greater than 0"))?;
            f.id = Some(id as u64);
        } else if is(opt, "ADDR") {
            f.addr = Some(text(v));
        } else if is(opt, "LADDR") {
            f.laddr = Some(text(v));
        } else if is(opt, "TYPE") {
            if ["replica", "slave", "master", "pubsub"]
                .iter()
                .any(|t| is(v, t))
            {
                nobody = true;
            } else if !is(v, "normal") {
                return Err(CmdError::new(format!(
                    "ERR Unknown client type '{}'",
                    text(v)
                )));
            }
        } else if is(opt, "USER") {
            if !is(v, "default") {
                return Err(CmdError::new(format!("ERR No such user '{}'", text(v))));
            }
        } else if is(opt, "SKIPME") {
            if is(v, "yes") {
                f.skip = Some(ctx.session.id);
            } else if is(v, "no") {
                f.skip = None;
            } else {
                return Err(CmdError::new(msg::SYNTAX));
            }
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
        i += 2;
    }
    let n = if nobody {
        0
    } else {
        ctx.shared.clients.kill(&f)
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// Shows the session's name, library and protocol in CLIENT LIST.
fn sync_client(ctx: &mut Ctx<'_>) {
    ctx.shared
        .clients
        .sync(ctx.session, ctx.out.protocol().version());
}

/// This client's CLIENT LIST line.
fn client_line(ctx: &mut Ctx<'_>, cmd: &str) -> String {
    let multi = ctx
        .session
        .tx
        .as_ref()
        .map_or(-1, |t| t.queued.len() as i64);
    ctx.shared
        .clients
        .line(ctx.session.id, multi, cmd)
        .unwrap_or_default()
}

fn set_info(ctx: &mut Ctx<'_>, attr: &[u8], value: &[u8]) -> CmdResult {
    let value = valid_name(value)?.to_vec();
    if is(attr, "LIB-NAME") {
        ctx.session.lib_name = Some(value);
    } else if is(attr, "LIB-VER") {
        ctx.session.lib_ver = Some(value);
    } else {
        return Err(CmdError::new(format!(
            "ERR Unrecognized option '{}'",
            String::from_utf8_lossy(attr)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
        assert!(same_secret(b"", b""));
    }

    #[test]
    fn client_names_must_be_printable_without_spaces() {
        assert!(valid_name(b"worker-1").is_ok());
        assert!(valid_name(b"").is_ok());
        assert!(valid_name(b"a b").is_err());
        assert!(valid_name(b"a\nb").is_err());
    }
}
