//! Watches survive their folders being deleted and recreated.

use crate::harness::{self, Host, Names};

use super::support::*;

#[tokio::test]
async fn watches_survive_their_folders_being_deleted_and_recreated() {
    let n = Names::new("reload-rmdir");
    let (qa, qb) = (n.q(), format!("{}.b", n.p));
    let only_a = format!("{}{}", topology_toml(&n), sub_toml(&n, &qa, "key", ""));
    let svc = Host::in_process(&only_a, &[("hot.wasm", &versioned(&n.out(), 0))]).await;
    let dir = svc.dir().to_path_buf();
    let plugins = dir.join("plugins");
    let (conn, ch) = harness::channel().await;
    harness::wait_consuming(&conn, &qa).await;
    assert_eq!(probe(&ch, &n, "start").await, 0);

    // `rm -rf plugins; mkdir plugins`, then a new version written into the new folder.
    std::fs::remove_dir_all(&plugins).expect("rm -rf plugins");
    std::fs::create_dir(&plugins).expect("mkdir plugins");
    std::fs::write(plugins.join("hot.wasm"), versioned(&n.out(), 1)).expect("write v1");
    probe_until(&ch, &n, 1, "plugins folder recreated").await;
    // The new folder is watched, not just swept once.
    write_via_rename(&plugins.join("hot.wasm"), &versioned(&n.out(), 2));
    probe_until(&ch, &n, 2, "written into the new folder").await;

    // A folder swapped in by rename, the way deploy tools do it.
    let staged = dir.join("plugins.new");
    std::fs::create_dir(&staged).expect("mkdir staged");
    std::fs::write(staged.join("hot.wasm"), versioned(&n.out(), 3)).expect("write v3");
    std::fs::rename(&plugins, dir.join("plugins.old")).expect("move away");
    std::fs::rename(&staged, &plugins).expect("move in");
    probe_until(&ch, &n, 3, "plugins folder swapped by rename").await;

    // The whole config folder (worker.toml and plugins/) deleted and recreated with a change:
    // the new subscription starts, the new plugin version serves.
    std::fs::remove_dir_all(&dir).expect("rm -rf the config folder");
    std::fs::create_dir_all(&plugins).expect("mkdir again");
    std::fs::write(plugins.join("hot.wasm"), versioned(&n.out(), 4)).expect("write v4");
    std::fs::write(
        dir.join("worker.toml"),
        format!("{only_a}{}", sub_toml(&n, &qb, "keyb", "")),
    )
    .expect("write worker.toml");
    harness::wait_consuming(&conn, &qb).await;
    probe_until(&ch, &n, 4, "config folder recreated").await;

    svc.stop().await;
    n.cleanup(&[qa, qb]).await;
}
