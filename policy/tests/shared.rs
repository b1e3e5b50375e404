//! `[shared]`: a policy's keyed state in a shared-memory region. Two policies
//! on one region (as two worker processes would have) share identical rules,
//! keep different ones apart, and a reload keeps the region's state.
#![cfg(feature = "shared")]

use sluicegate_policy::{Code, Policy};

fn region(name: &str) -> String {
    let p = std::env::temp_dir().join(format!("sg-policy-{}-{name}", std::process::id()));
    sluicegate_shm::unlink(&p).unwrap();
    p.display().to_string()
}

fn text(path: &str, limit: &str) -> String {
    format!(
        "[shared]\npath = \"{path}\"\n\n[[rule]]\nname = \"per-ip\"\nlimit = \"{limit}\"\nkey = [\"ip\"]\n"
    )
}

#[test]
fn two_policies_on_one_region_share_identical_rules() {
    let path = region("two");
    let a = Policy::from_toml(&text(&path, "3/hour")).unwrap();
    let b = Policy::from_toml(&text(&path, "3/hour")).unwrap();
    let other = Policy::from_toml(&text(&path, "5/hour")).unwrap();
    let req = [("ip", "192.0.2.1")];
    assert!(a.check_n_at(&req, 2, 0).allowed());
    assert!(b.check_n_at(&req, 1, 0).allowed());
    assert!(!a.check_n_at(&req, 1, 0).allowed());
    assert!(!b.check_n_at(&req, 1, 0).allowed());
    // Another limit on the same key never mixes with the first.
    assert!(other.check_n_at(&req, 5, 0).allowed());
    // A reload that keeps the rule keeps its state; one that changes it starts
    // a limit of its own in the same region.
    a.reload_from_toml(&text(&path, "3/hour")).unwrap();
    assert!(!a.check_n_at(&req, 1, 0).allowed());
    a.reload_from_toml(&text(&path, "4/hour")).unwrap();
    assert!(a.check_n_at(&req, 4, 0).allowed());
    sluicegate_shm::unlink(&path).unwrap();
}

#[test]
fn a_region_that_cannot_be_used_names_the_field() {
    let bad = std::env::temp_dir().join(format!("sg-policy-{}-junk", std::process::id()));
    std::fs::write(&bad, vec![0x5a; 8192]).unwrap();
    let err = Policy::from_toml(&text(&bad.display().to_string(), "1/s")).unwrap_err();
    let d = &err.diagnostics()[0];
    assert_eq!(
        (d.code, d.field.as_deref()),
        (Code::Build, Some("shared.path"))
    );
    assert!(
        d.message.contains("not a sluicegate shared region"),
        "{}",
        d.message
    );
    std::fs::remove_file(&bad).unwrap();
    let err = Policy::from_toml("[shared]\npath = \"\"\n").unwrap_err();
    assert_eq!(err.diagnostics()[0].field.as_deref(), Some("shared.path"));
}
