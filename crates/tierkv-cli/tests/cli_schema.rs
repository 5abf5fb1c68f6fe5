//! `tierkv schema` and `tierkv row` end to end, on `focus` (native schema API) and on
//! `hetermm` (the consolidated adapter): declare, put, read fields, update, list, delete,
//! with the exit codes for an absent row and a refused value.

use std::path::Path;
use std::process::{Command, Output};

fn tierkv(dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tierkv"));
    c.args(args).arg("--dir").arg(dir);
    c.output().expect("run tierkv")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn rows_are_declared_written_read_and_updated_field_by_field() {
    for engine in ["focus", "hetermm"] {
        let d = tempfile::tempdir().expect("tempdir");
        let dir = d.path().join("s");
        let create = [
            "schema",
            "create",
            "--engine",
            engine,
            "--pmem-size",
            "16MiB",
            "--pmem-mode",
            "volatile",
            "people",
            "age:fixed:2",
            "name:var:40",
        ];
        let o = tierkv(&dir, &create);
        assert_eq!(o.status.code(), Some(0), "{engine}: {o:?}");
        assert_eq!(stdout(&o), "1\tpeople\tage:fixed:2 name:var:40\n");
        let o = tierkv(&dir, &["row", "put", "people", "bob", "42", "Bob Smith"]);
        assert_eq!(o.status.code(), Some(0), "{engine}: {o:?}");
        let o = tierkv(&dir, &["row", "get", "people", "bob"]);
        assert_eq!(stdout(&o), "age\t42\nname\tBob Smith\n", "{engine}");
        let o = tierkv(&dir, &["row", "update", "people", "bob", "name=Robert"]);
        assert_eq!(o.status.code(), Some(0), "{engine}: {o:?}");
        let o = tierkv(
            &dir,
            &["row", "get", "people", "bob", "--fields", "name,age"],
        );
        assert_eq!(stdout(&o), "name\tRobert\nage\t42\n", "{engine}");
        let o = tierkv(&dir, &["row", "update", "people", "nobody", "age=11"]);
        assert_eq!(o.status.code(), Some(3), "{engine}: absent row");
        let o = tierkv(&dir, &["row", "put", "people", "x", "123", "y"]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{engine}: a 3-byte value for a 2-byte field"
        );
        let o = tierkv(&dir, &["schema", "show"]);
        assert_eq!(
            stdout(&o),
            "1\tpeople\tage:fixed:2 name:var:40\n",
            "{engine}"
        );
        assert_eq!(tierkv(&dir, &["check"]).status.code(), Some(0), "{engine}");
        assert_eq!(
            tierkv(&dir, &["row", "del", "people", "bob"]).status.code(),
            Some(0)
        );
        let o = tierkv(&dir, &["row", "get", "people", "bob"]);
        assert_eq!(o.status.code(), Some(3), "{engine}: deleted");
    }
}
