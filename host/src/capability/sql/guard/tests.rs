//! The guard on texts alone: what passes, and what each refusal says.

use super::{Pass, check};
use crate::config::SqlKind::{self, MySql, Postgres, Sqlite};

const ALL: [SqlKind; 3] = [Sqlite, Postgres, MySql];

fn refused(kind: SqlKind, sql: &str) -> String {
    match check(kind, sql) {
        Err(why) => why.0,
        Ok(pass) => panic!("{kind:?} let through {sql:?} ({pass:?})"),
    }
}

fn passes(kind: SqlKind, sql: &str) -> Pass {
    check(kind, sql).unwrap_or_else(|why| panic!("{kind:?} refused {sql:?}: {why}"))
}

#[test]
fn queries_and_data_changes_pass() {
    for kind in ALL {
        for sql in [
            "SELECT 1",
            "  -- a comment\n select * from t where a = 1",
            "/* c */ INSERT INTO t (a) VALUES (1)",
            "UPDATE t SET a = 2",
            "DELETE FROM t",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c",
            "(SELECT 1) UNION (SELECT 2)",
            "SELECT 1;",
            "SELECT 'a; COMMIT; b'",
            "SELECT worker_id FROM jobs",
            "EXPLAIN SELECT 1",
            "SELECT 'pg_read_file is a name, not a call'",
        ] {
            assert_eq!(passes(kind, sql), Pass::Plain, "{sql}");
        }
    }
    passes(
        Postgres,
        "SELECT $1, $$x; COMMIT$$, current_setting('search_path')",
    );
    passes(Postgres, "SHOW search_path");
    passes(Postgres, "EXPLAIN (ANALYZE, FORMAT JSON) SELECT 1");
    passes(Postgres, "SELECT * INTO new_table FROM t");
    passes(Sqlite, "REPLACE INTO t VALUES (1)");
    passes(Sqlite, "PRAGMA table_info(t)");
    passes(MySql, "SELECT @@version, 'a@b.example'");
    passes(MySql, "SELECT 'it\\'s; COMMIT'");
}

#[test]
fn ddl_of_own_objects_passes() {
    for kind in ALL {
        for sql in [
            "CREATE TABLE IF NOT EXISTS demo (a INTEGER)",
            "CREATE UNIQUE INDEX i ON demo (a)",
            "CREATE VIEW v AS SELECT a FROM demo",
            "ALTER TABLE demo ADD COLUMN b INTEGER",
            "DROP TABLE IF EXISTS demo",
            "DROP INDEX i",
        ] {
            let want = if kind == MySql {
                Pass::ImplicitCommit
            } else {
                Pass::Plain
            };
            assert_eq!(passes(kind, sql), want, "{kind:?}: {sql}");
        }
    }
    passes(Postgres, "CREATE OR REPLACE VIEW v AS SELECT 1");
    passes(Postgres, "CREATE TYPE mood AS ENUM ('ok', 'sad')");
    passes(Postgres, "TRUNCATE demo");
    passes(Sqlite, "CREATE VIRTUAL TABLE f USING fts5(body)");
}

#[test]
fn more_than_one_statement_is_refused() {
    for kind in ALL {
        let why = refused(kind, "INSERT INTO t VALUES (1); COMMIT; SELECT 1");
        assert!(
            why.contains("one statement per call: this text holds 3"),
            "{why}"
        );
        refused(kind, "SELECT 1; SELECT 2;");
    }
    // A semicolon inside a string, a comment or dollar quotes does not count.
    passes(Postgres, "SELECT $t$;$t$ -- ;\n");
    passes(Sqlite, "SELECT ';' /* ; */");
}

#[test]
fn transaction_control_is_refused() {
    for kind in ALL {
        for sql in [
            "COMMIT",
            "commit",
            "END",
            "  /* x */ ROLLBACK",
            "BEGIN",
            "START TRANSACTION",
            "SAVEPOINT s",
            "RELEASE SAVEPOINT s",
            ";COMMIT",
            "(COMMIT)",
        ] {
            let why = refused(kind, sql);
            assert!(
                why.contains("the host owns the message's transaction"),
                "{sql}: {why}"
            );
        }
    }
}

#[test]
fn session_settings_are_refused() {
    for kind in ALL {
        for sql in [
            "SET search_path = x",
            "SET ROLE other",
            "RESET ALL",
            "DISCARD ALL",
        ] {
            let why = refused(kind, sql);
            assert!(why.contains("session"), "{sql}: {why}");
        }
    }
    for sql in [
        "SELECT set_config('statement_timeout', '0', false)",
        "SELECT pg_catalog.set_config('search_path', 'x', true)",
        "SELECT \"set_config\"('a', 'b', true)",
        "SELECT pg_advisory_lock(1)",
    ] {
        refused(Postgres, sql);
    }
    refused(Postgres, "CREATE TEMP TABLE x (a int)");
    refused(Postgres, "CREATE GLOBAL TEMPORARY TABLE x (a int)");
    refused(Postgres, "SELECT 1 INTO TEMP x");
    refused(Sqlite, "CREATE TEMPORARY VIEW v AS SELECT 1");
    let why = refused(MySql, "SELECT @x := 1");
    assert!(why.contains("user variables"), "{why}");
    refused(MySql, "SELECT a INTO @v FROM t");
    refused(MySql, "SELECT GET_LOCK('x', 1)");
}

#[test]
fn reaching_past_the_database_is_refused() {
    refused(Sqlite, "ATTACH DATABASE '/tmp/other.db' AS other");
    refused(Sqlite, "DETACH other");
    refused(Sqlite, "VACUUM INTO '/tmp/copy.db'");
    refused(Sqlite, "SELECT load_extension('x.so')");
    refused(Postgres, "COPY t TO PROGRAM 'id'");
    refused(Postgres, "SELECT pg_read_file('/etc/passwd')");
    refused(
        Postgres,
        "SELECT * FROM dblink('host=x', 'SELECT 1') AS t(a int)",
    );
    refused(Postgres, "SELECT dblink_exec('host=x', 'DROP TABLE t')");
    refused(Postgres, "SELECT lo_import('/etc/passwd')");
    refused(Postgres, "SELECT query_to_xml('SELECT 1', true, true, '')");
    refused(Postgres, "DO $$ BEGIN END $$");
    refused(
        Postgres,
        "CREATE FUNCTION f() RETURNS int AS 'SELECT 1' LANGUAGE sql",
    );
    refused(Postgres, "CALL p()");
    refused(Postgres, "PREPARE p AS SELECT 1");
    refused(Postgres, "LISTEN x");
    let why = refused(MySql, "SELECT * FROM t INTO OUTFILE '/tmp/x'");
    assert!(why.contains("OUTFILE"), "{why}");
    refused(MySql, "SELECT 'x' INTO DUMPFILE '/tmp/x'");
    refused(MySql, "LOAD DATA INFILE '/etc/passwd' INTO TABLE t");
    refused(MySql, "SELECT LOAD_FILE('/etc/passwd')");
    refused(MySql, "SELECT 1 /*M!100000 INTO OUTFILE '/tmp/x' */");
    refused(MySql, "SELECT 1 /*!50000 , LOAD_FILE('/etc/passwd') */");
    refused(MySql, "CREATE PROCEDURE p() SELECT 1");
    refused(
        MySql,
        "CREATE TRIGGER t BEFORE INSERT ON x FOR EACH ROW SET @a = 1",
    );
}

#[test]
fn the_host_tables_are_refused_however_named() {
    for kind in ALL {
        for sql in [
            "SELECT * FROM worker_inbox",
            "INSERT INTO worker_outbox VALUES (1)",
            "DELETE FROM WORKER_INBOX",
            "SELECT * FROM \"worker_inbox\"",
            "SELECT * FROM main.worker_outbox_schema",
            "CREATE VIEW v AS SELECT * FROM worker_inbox",
            "CREATE TABLE worker_outbox (a int)",
            "SELECT 'worker_inbox'",
        ] {
            let why = refused(kind, sql);
            assert!(why.contains("the host's tables"), "{kind:?}: {sql}: {why}");
        }
    }
    refused(Sqlite, "SELECT * FROM [worker_inbox]");
    refused(MySql, "SELECT * FROM `worker_inbox`");
    refused(Postgres, "SELECT * FROM U&\"worker\\005finbox\"");
}

#[test]
fn only_the_listed_kinds_pass() {
    for kind in ALL {
        for sql in [
            "GRANT ALL ON t TO x",
            "CREATE TRIGGER t AFTER INSERT ON x BEGIN SELECT 1; END",
            "CREATE SCHEMA s",
            "CREATE EXTENSION dblink",
            "CREATE ROLE r",
            "LOCK TABLE t",
            "\"SELECT\" 1",
        ] {
            refused(kind, sql);
        }
    }
    refused(Postgres, "EXPLAIN ANALYZE COMMIT");
    refused(MySql, "EXPLAIN ANALYZE SET @a = 1");
    refused(Postgres, "PRAGMA foreign_keys = OFF");
}

#[test]
fn remembered_verdicts_are_the_guards() {
    let texts = [
        "INSERT INTO t (a) VALUES (1)",
        "CREATE TABLE t (a INT)",
        "SELECT * FROM worker_outbox",
        "COMMIT",
    ];
    for kind in ALL {
        let checked = super::Checked::new(kind);
        for _ in 0..2 {
            for sql in texts {
                assert_eq!(checked.check(sql), check(kind, sql), "{kind:?} {sql:?}");
            }
        }
    }
    // Past the bound it starts again, and still answers as the guard does.
    let checked = super::Checked::new(Sqlite);
    for i in 0..super::CHECKED_TEXTS + 10 {
        assert_eq!(checked.check(&format!("SELECT {i}")), Ok(Pass::Plain));
    }
    assert!(checked.check("SELECT * FROM worker_inbox").is_err());
    let long = format!("SELECT 1{}", " ".repeat(super::CHECKED_LEN));
    assert_eq!(checked.check(&long), Ok(Pass::Plain));
}
