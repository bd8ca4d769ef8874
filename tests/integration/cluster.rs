//! Many hosts on a RabbitMQ cluster (the three local nodes of scripts/cluster.sh), quorum
//! queues, the capability probe writing each message's id to PostgreSQL with the outbox on:
//! killing the node that leads `Q` and SIGKILLing one host lose nothing and apply no effect
//! twice; a message waiting in a retry queue survives the death of that queue's leader (the
//! at-least-once dead-lettering proven); a message that keeps killing hosts is parked when it
//! passes the queue's delivery limit, not lost. They need the cluster, which scripts/test.sh starts
//! for them and stops after (the `cluster_` prefix); they run alone, one at a time.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::{AssertSqlSafe, PgPool};

use crate::capabilities::db;
use crate::capabilities::support::{POSTGRES, require as require_server};
use crate::harness::{self, Host};
use support::{kill, leader, metric_of, queue_state, revive, start};

const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// One test's names, its rows table and the cluster connection it watches through.
struct Case {
    p: String,
    rows: String,
    db: PgPool,
    conn: lapin::Connection,
    ch: lapin::Channel,
}

impl Case {
    async fn new(test: &str) -> Case {
        support::require();
        require_server(&POSTGRES);
        let p = harness::unique(test);
        let rows = db::table("cluster_rows");
        let db = PgPool::connect(POSTGRES_URL)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL: {e}\nstart it with: {}", POSTGRES.start));
        let create = format!("CREATE TABLE {rows} (id VARCHAR(64) NOT NULL)");
        sqlx::query(AssertSqlSafe(create))
            .execute(&db)
            .await
            .expect("create rows");
        let (conn, ch) = support::channel().await;
        Case {
            p,
            rows,
            db,
            conn,
            ch,
        }
    }

    fn q(&self) -> String {
        format!("{}.q", self.p)
    }

    /// The probe on quorum queue `Q`, with the outbox on PostgreSQL, retrying after `delay`;
    /// `extra`: more keys of the subscription.
    fn subscription(&self, delay: &str, extra: &str) -> String {
        format!(
            "[[subscription]]\nqueue = \"{q}\"\nplugin = \"cap_probe.wasm\"\n\
             bindings = [\"{q}.*\"]\nqueue_type = \"quorum\"\nretry_delays = [\"{delay}\"]\n\
             max_retries = 3\nconcurrency = 8\nprefetch = 16\nsql = \"db\"\noutbox = true\n{extra}\n\
             [sql.db]\nurl = \"{POSTGRES_URL}\"\n",
            q = self.q()
        )
    }

    /// Message `i`: inserts its id into the rows table; `retry_once` answers retry on its first
    /// attempt (nothing written: the outbox rolls a retry back), ok on the second.
    fn message(&self, i: usize, retry_once: bool) -> (String, String) {
        let id = format!("m{i:05}");
        let insert = format!("INSERT INTO {} (id) VALUES ($1)", self.rows);
        let steps = json!([{"sql": "execute", "statement": insert, "params": [id]}]);
        let script = if retry_once {
            json!({"id": id, "steps": steps, "answer": "retry", "until_attempt": 2})
        } else {
            json!({"id": id, "steps": steps})
        };
        (id, script.to_string())
    }

    async fn publish(&self, messages: &[(String, String)]) {
        let key = format!("{}.x", self.q());
        support::publish_all(&self.ch, &format!("{}.master", self.p), &key, messages).await;
    }

    /// (rows, distinct ids) written so far.
    async fn effects(&self) -> (i64, i64) {
        let sql = format!("SELECT COUNT(*), COUNT(DISTINCT id) FROM {}", self.rows);
        sqlx::query_as::<_, (i64, i64)>(AssertSqlSafe(sql))
            .fetch_one(&self.db)
            .await
            .expect("count rows")
    }

    /// Waits until `consumers` hosts consume from `Q`.
    async fn await_consumers(&self, consumers: u32, hosts: &mut [Host]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while queue_state(&self.conn, &self.q()).await.map(|s| s.1) != Some(consumers) {
            hosts.iter_mut().for_each(|h| h.assert_running());
            assert!(
                Instant::now() < deadline,
                "{consumers} consumers on {} after 60 s",
                self.q()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until `distinct` ids are written, failing after `limit` with the count reached.
    async fn await_effects(
        &self,
        distinct: i64,
        limit: Duration,
        hosts: &mut [&mut Host],
    ) -> (i64, i64) {
        let seen = self.effects_within(distinct, limit, hosts).await;
        assert!(
            seen.1 >= distinct,
            "{} of {distinct} ids written after {limit:?}",
            seen.1
        );
        seen
    }

    /// (rows, distinct ids) once `distinct` ids are written or `limit` has passed, whichever is
    /// first; fails at once if a host has died.
    async fn effects_within(
        &self,
        distinct: i64,
        limit: Duration,
        hosts: &mut [&mut Host],
    ) -> (i64, i64) {
        let deadline = Instant::now() + limit;
        loop {
            let seen = self.effects().await;
            if seen.1 >= distinct || Instant::now() >= deadline {
                return seen;
            }
            hosts.iter_mut().for_each(|h| h.assert_running());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Messages ready in `queue` (0 while the queue cannot be reached).
    async fn ready(&self, queue: &str) -> u32 {
        queue_state(&self.conn, queue).await.map_or(0, |s| s.0)
    }

    async fn cleanup(self, delay: &str) {
        let q = self.q();
        for queue in [
            q.clone(),
            format!("{q}@failed"),
            format!("{q}@retry.{delay}"),
        ] {
            if let Ok(ch) = self.conn.create_channel().await {
                let _ = ch
                    .queue_delete(queue.as_str().into(), Default::default())
                    .await;
            }
        }
        for e in ["master", "retry", "failed"] {
            if let Ok(ch) = self.conn.create_channel().await {
                let name = format!("{}.{e}", self.p);
                let _ = ch
                    .exchange_delete(name.as_str().into(), Default::default())
                    .await;
            }
        }
        let drop = format!("DROP TABLE IF EXISTS {}", self.rows);
        let _ = sqlx::query(AssertSqlSafe(drop)).execute(&self.db).await;
        let _ = self.conn.close(200, "done".into()).await;
    }
}

/// Revives a killed node when the test ends, however it ends.
struct Revive(Option<usize>);

impl Drop for Revive {
    fn drop(&mut self) {
        if let Some(node) = self.0.take() {
            revive(node);
        }
    }
}

const MESSAGES: usize = 10_000;

#[tokio::test]
async fn cluster_three_hosts_lose_nothing_when_a_node_and_a_host_die() {
    let case = Case::new("cl-three").await;
    let delay = "1s";
    let sub = case.subscription(delay, "");
    let mut hosts: Vec<Host> = (0..3).map(|_| start(&case.p, &sub)).collect();
    case.await_consumers(3, &mut hosts).await;
    // The topology is declared: the hosts stop while Q fills, so the node and the host die
    // mid-stream however fast they consume.
    for host in &mut hosts {
        assert!(host.terminate().await.success(), "{}", host.log());
    }
    let messages: Vec<_> = (0..MESSAGES)
        .map(|i| case.message(i, i % 10 == 0))
        .collect();
    let started = Instant::now();
    case.publish(&messages).await;
    println!("published {MESSAGES} in {:?}", started.elapsed());
    // Asked now, while nothing consumes: rabbitmqctl takes seconds, in which a fast machine
    // can finish the stream.
    let node = leader(&case.q());
    let retry_leader = leader(&format!("{}@retry.{delay}", case.q()));
    for host in &mut hosts {
        host.respawn();
    }
    case.await_consumers(3, &mut hosts).await;

    // The node leading Q dies mid-stream.
    let mut alive: Vec<&mut Host> = hosts.iter_mut().collect();
    case.await_effects(1_000, Duration::from_secs(120), &mut alive)
        .await;
    let before = case.effects().await.1;
    assert!(
        before + 100 <= MESSAGES as i64,
        "the stream would end ({before} ids written) before node {node} died"
    );
    let killed = Instant::now();
    kill(node);
    let mut down = Revive(Some(node));
    let resumed = case
        .await_effects(before + 100, Duration::from_secs(15), &mut alive)
        .await;
    let failover = killed.elapsed();
    println!(
        "killed node {node} (leader of Q; the retry queue's leader was node {retry_leader}) \
         at {before} ids; 100 more after {failover:?}"
    );

    // A host dies mid-stream; the other two finish.
    let target = (resumed.1 + 2_000).min(MESSAGES as i64 - 1_000);
    case.await_effects(target, Duration::from_secs(120), &mut alive)
        .await;
    alive.remove(0).kill();
    println!("SIGKILLed host 1 at {target}+ ids");
    // The dead node comes back, as a supervised one would. RabbitMQ 3.10's at-least-once
    // dead-lettering can stall when the node leading both a retry queue and its target dies
    // (docs/scaling.md): the messages stay in the retry queue, safe, until its leader changes
    // again, as a returning node makes it.
    let revived = Instant::now();
    if let Some(node) = down.0.take() {
        revive(node);
    }
    println!("revived node {node} in {:?}", revived.elapsed());
    let (rows, distinct) = case
        .await_effects(MESSAGES as i64, Duration::from_secs(120), &mut alive)
        .await;
    let q = case.q();
    let deadline = Instant::now() + Duration::from_secs(30);
    while case.ready(&q).await + case.ready(&format!("{q}@retry.{delay}")).await > 0 {
        assert!(
            Instant::now() < deadline,
            "Q or its retry queue not empty after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut duplicates = 0.0;
    for host in &alive {
        duplicates += metric_of(host, "worker_duplicates_total", "")
            .await
            .unwrap_or(0.0);
    }
    let total = started.elapsed();
    println!(
        "{MESSAGES} messages, 3 hosts, a node and a host killed: {distinct} handled, lost {}, \
         effects applied twice {}, duplicate deliveries seen by the surviving hosts {duplicates}, \
         failover {failover:?}, all done in {total:?}",
        MESSAGES as i64 - distinct,
        rows - distinct
    );
    assert_eq!(distinct, MESSAGES as i64, "every message handled");
    assert_eq!(rows, distinct, "no effect applied twice");
    assert_eq!(
        case.ready(&format!("{q}@failed")).await,
        0,
        "nothing parked"
    );
    assert!(
        failover < Duration::from_secs(15),
        "handling resumed in {failover:?}"
    );
    for host in hosts.into_iter().skip(1) {
        host.stop().await;
    }
    case.cleanup(delay).await;
}

#[tokio::test]
async fn cluster_a_retry_hop_survives_the_death_of_the_retry_queues_leader() {
    const WAITING: usize = 300;
    let case = Case::new("cl-hop").await;
    let delay = "8s";
    let mut host = start(&case.p, &case.subscription(delay, ""));
    case.await_consumers(1, std::slice::from_mut(&mut host))
        .await;
    let messages: Vec<_> = (0..WAITING).map(|i| case.message(i, true)).collect();
    case.publish(&messages).await;

    // Every message answered retry once and waits in the retry queue: its leader dies.
    let retry = format!("{}@retry.{delay}", case.q());
    let deadline = Instant::now() + Duration::from_secs(30);
    while case.ready(&retry).await < WAITING as u32 {
        host.assert_running();
        assert!(
            Instant::now() < deadline,
            "{WAITING} messages not in {retry} after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let node = leader(&retry);
    let q_leader = leader(&case.q());
    kill(node);
    let mut down = Revive(Some(node));
    println!(
        "killed node {node}, leader of {retry} (Q's leader: node {q_leader}), with {WAITING} \
         messages waiting in it"
    );
    // RabbitMQ 3.10's dead-letter worker can stall when the node leading both queues dies
    // (docs/scaling.md); the messages stay safe in the retry queue until its leader changes
    // again. So, as a supervisor would, the node comes back after a while, and only then must
    // every message have come back once.
    let hop = Instant::now();
    if case
        .effects_within(WAITING as i64, Duration::from_secs(45), &mut [&mut host])
        .await
        .1
        < WAITING as i64
    {
        if let Some(node) = down.0.take() {
            revive(node);
        }
        println!(
            "{} ids after {:?} with node {node} down: revived it (the 3.10 stall)",
            case.effects().await.1,
            hop.elapsed()
        );
    }
    let (rows, distinct) = case
        .await_effects(WAITING as i64, Duration::from_secs(120), &mut [&mut host])
        .await;
    println!("every message back after {:?}", hop.elapsed());
    assert_eq!(
        (rows, distinct),
        (WAITING as i64, WAITING as i64),
        "each came back once"
    );
    assert_eq!(
        case.ready(&format!("{}@failed", case.q())).await,
        0,
        "nothing parked"
    );
    host.stop().await;
    case.cleanup(delay).await;
}

#[tokio::test]
async fn cluster_a_message_over_its_delivery_limit_is_parked() {
    let case = Case::new("cl-limit").await;
    // A poison message that takes its host down every time: redelivered once, then over the
    // limit. RabbitMQ drops such a message, dead-lettering it: Q's dead-letter exchange is the
    // failed exchange with key Q, so it is parked.
    let policy = format!("{}-limit", case.p);
    let pattern = format!("^{}$", case.q().replace('.', "\\."));
    support::rabbitmqctl(&[
        "set_policy",
        "--apply-to",
        "queues",
        &policy,
        &pattern,
        r#"{"delivery-limit": 1}"#,
    ]);
    let sub = case.subscription("1s", "timeout = \"60s\"\n");
    let script = json!({"id": "poison", "answer": "sleep"}).to_string();
    let failed = format!("{}@failed", case.q());
    for round in 1..=2 {
        let mut host = start(&case.p, &sub);
        case.await_consumers(1, std::slice::from_mut(&mut host))
            .await;
        if round == 1 {
            case.publish(&[("poison".to_owned(), script.clone())]).await;
        }
        // Taken (nothing ready), then the host dies with it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while case.ready(&case.q()).await > 0 {
            assert!(
                Instant::now() < deadline,
                "round {round}: the message was not taken"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        host.kill();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while case.ready(&failed).await == 0 {
        assert!(
            Instant::now() < deadline,
            "not parked in {failed} after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(case.ready(&case.q()).await, 0, "not left in Q");
    let parked = harness::get(&case.ch, &failed)
        .await
        .expect("the parked message");
    let headers = harness::headers_of(&parked);
    assert_eq!(
        headers.get("x-first-death-reason").map(String::as_str),
        Some("delivery_limit"),
        "dropped for its delivery limit: {headers:?}"
    );
    support::rabbitmqctl(&["clear_policy", &policy]);
    case.cleanup("1s").await;
}
