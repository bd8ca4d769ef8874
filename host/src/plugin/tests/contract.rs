//! ABI v1 walked through the host and compared with the SDK: every publish code, answer and log
//! level the host produces means the same in `worker_abi` and in `worker-plugin-sdk`, and the
//! host links every import and checks every export `worker_abi` lists.

use std::collections::BTreeSet;

use worker_abi::{Answer as AbiAnswer, LogLevel as AbiLevel, PublishRefusal, export, import};
use worker_plugin_sdk::{Outcome, PublishError};

use super::*;

/// The codes the `publish_refusals` fixture recorded, one per publish.
async fn publish_codes() -> Vec<i32> {
    let mut inp = input("");
    inp.publish = Arc::new(PublishPolicy {
        allowed_exchanges: vec!["out".into()],
        max_delay: Some(Duration::from_secs(10)),
        max_messages: 2,
        max_total_bytes: 100,
    });
    let inv = run("publish_refusals", inp).await;
    assert_eq!(inv.answer, Ok(Answer::Ok), "{:?}", inv.answer);
    let refused = inv.logs.iter().filter(|l| l.source == LogSource::Host);
    assert_eq!(
        refused.count(),
        7,
        "one warning per refusal: {:?}",
        inv.logs
    );
    let reason = inv.reason.expect("the fixture records its codes");
    reason
        .bytes()
        .map(|b| i32::from(b'0') - i32::from(b))
        .collect()
}

#[tokio::test]
async fn every_publish_code_means_the_same_to_host_and_sdk() {
    // What each publish of the fixture is, and what a plugin author must be told.
    let situations = [
        ("accepted", "out", None),
        (
            "exchange not in the list",
            "nope",
            Some(PublishError::ExchangeNotAllowed("nope".into())),
        ),
        ("negative delay", "out", Some(PublishError::DelayRefused)),
        (
            "delay over the maximum",
            "out",
            Some(PublishError::DelayRefused),
        ),
        ("too many bytes", "out", Some(PublishError::TooManyBytes)),
        (
            "exchange not UTF-8",
            "\u{fffd}",
            Some(PublishError::Invalid),
        ),
        (
            "routing key over 255 bytes",
            "out",
            Some(PublishError::Invalid),
        ),
        ("accepted", "out", None),
        (
            "too many messages",
            "out",
            Some(PublishError::TooManyMessages),
        ),
    ];
    let codes = publish_codes().await;
    assert_eq!(codes.len(), situations.len(), "{codes:?}");

    let mut walked = BTreeSet::new();
    for ((what, exchange, told), code) in situations.into_iter().zip(codes) {
        let sdk = PublishError::from_code(code, exchange);
        assert_eq!(sdk, told, "{what}: the host returned {code}");
        let refusal = PublishRefusal::from_code(code);
        assert_eq!(
            sdk.as_ref().and_then(PublishError::refusal),
            refusal,
            "{what}"
        );
        assert_eq!(
            sdk.as_ref().and_then(PublishError::code),
            refusal.map(|r| r.code())
        );
        if let Some(r) = refusal {
            walked.insert(r.code());
        } else {
            assert_eq!(code, worker_abi::PUBLISH_ACCEPTED, "{what}");
        }
    }
    let all: BTreeSet<i32> = PublishRefusal::ALL.iter().map(|r| r.code()).collect();
    assert_eq!(
        walked, all,
        "the fixture must walk every refusal of the ABI"
    );

    // And back: every refusal the SDK knows carries the code the host used for it.
    for r in PublishRefusal::ALL {
        let sdk = PublishError::from_code(r.code(), "x").expect("a refusal");
        assert_eq!((sdk.refusal(), sdk.code()), (Some(r), Some(r.code())));
        assert!(sdk.to_string().contains(r.description()), "{sdk}");
    }
    let newer = PublishError::from_code(-99, "x");
    assert_eq!(newer, Some(PublishError::Other(-99)));
}

fn answering(code: i32) -> Vec<u8> {
    let wat = format!(
        r#"(module (memory (export "{memory}") 1) (func (export "{marker}"))
             (func (export "{handle}") (result i32) (i32.const {code})))"#,
        memory = export::MEMORY,
        marker = export::MARKER,
        handle = export::HANDLE,
    );
    wat::parse_str(wat).expect("wat")
}

#[tokio::test]
async fn every_answer_means_the_same_to_host_and_sdk() {
    for answer in AbiAnswer::ALL {
        let name = format!("answer_{}.wasm", answer.code());
        let plugin = runtime()
            .load_bytes(&name, &answering(answer.code()))
            .expect("loads");
        let inv = plugin.handle(Arc::new(input("")), &limits()).await;
        let host = inv.answer.expect("an answer");
        let sdk = match answer {
            AbiAnswer::Ok => Outcome::Ok,
            AbiAnswer::Retry => Outcome::retry("r"),
            AbiAnswer::Fail => Outcome::fail("f"),
        };
        assert_eq!(sdk.code(), answer.code());
        assert_eq!(sdk.answer(), answer);
        assert_eq!(
            format!("{host:?}").to_lowercase(),
            answer.name(),
            "{answer:?}"
        );
    }
    let bad = runtime()
        .load_bytes("answer_3.wasm", &answering(3))
        .expect("loads");
    let inv = bad.handle(Arc::new(input("")), &limits()).await;
    assert_eq!(inv.answer, Err(HandlerError::BadAnswer(3)));
    assert_eq!(
        inv.answer.unwrap_err().to_string(),
        "bad answer: worker_handle returned 3 (expected 0 ok, 1 retry, 2 fail)"
    );
}

#[tokio::test]
async fn every_log_level_means_the_same_to_host_and_sdk() {
    let levels = -2..=6;
    let calls: String = levels
        .clone()
        .map(|l| format!("(call $log (i32.const {l}) (i32.const 0) (i32.const 1))"))
        .collect();
    let wat = format!(
        r#"(module (import "{module}" "{log}" (func $log (param i32 i32 i32)))
             (memory (export "memory") 1) (data (i32.const 0) "x") (func (export "worker_abi_v1"))
             (func (export "worker_handle") (result i32) {calls} (i32.const 0)))"#,
        module = worker_abi::ABI_MODULE,
        log = import::LOG,
    );
    let plugin = runtime()
        .load_bytes("levels.wasm", &wat::parse_str(wat).expect("wat"))
        .expect("loads");
    let inv = plugin.handle(Arc::new(input("")), &limits()).await;
    let host: Vec<String> = inv.logs.iter().map(|l| format!("{:?}", l.level)).collect();
    let sdk: Vec<String> = levels
        .map(|l| format!("{:?}", worker_plugin_sdk::Level::from_code(l)))
        .collect();
    assert_eq!(host, sdk);
    let seen: BTreeSet<String> = host.iter().map(|l| l.to_lowercase()).collect();
    let all: BTreeSet<String> = AbiLevel::ALL.iter().map(|l| l.name().to_owned()).collect();
    assert_eq!(seen, all);
}

#[test]
fn every_import_links_and_every_export_is_required() {
    let imports: String = import::ALL
        .iter()
        .enumerate()
        .map(|(i, imp)| {
            let ty = |kw: &str, types: &[worker_abi::ValType]| {
                let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
                format!("({kw} {})", names.join(" "))
            };
            format!(
                r#"(import "{}" "{}" (func $f{i} {} {}))"#,
                worker_abi::ABI_MODULE,
                imp.name,
                ty("param", imp.signature.params),
                ty("result", imp.signature.results),
            )
        })
        .collect();
    let module =
        |exports: &str| wat::parse_str(format!("(module {imports} {exports})")).expect("wat");
    let exports: Vec<(&str, String)> = export::ALL
        .iter()
        .map(|e| {
            let wat = match e.name {
                export::MEMORY => format!(r#"(memory (export "{}") 1)"#, e.name),
                export::HANDLE => {
                    format!(r#"(func (export "{}") (result i32) (i32.const 0))"#, e.name)
                }
                _ => format!(r#"(func (export "{}"))"#, e.name),
            };
            (e.name, wat)
        })
        .collect();
    let all: String = exports.iter().map(|(_, w)| w.as_str()).collect();
    runtime()
        .load_bytes("every_import.wasm", &module(&all))
        .unwrap_or_else(|e| panic!("{e}"));
    for (name, _) in &exports {
        let without: String = exports
            .iter()
            .filter(|(n, _)| n != name)
            .map(|(_, w)| w.as_str())
            .collect();
        let err = runtime()
            .load_bytes("missing.wasm", &module(&without))
            .unwrap_err();
        assert!(
            matches!(&err, LoadError::MissingExport { export, .. } if export == name),
            "{err}"
        );
    }
}
