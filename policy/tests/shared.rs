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

/// A region's registry is fixed at creation (`Options::limits`) and its
/// entries are never freed (another process may use any of them). A reload
/// whose new limits no longer fit is a clear error, and the old rules keep
/// running with their state; unchanged rules take no new entry.
#[test]
fn a_reload_that_no_longer_fits_the_region_keeps_the_old_rules() {
    let path = region("full");
    // Room for 4 limits.
    let options = sluicegate_shm::Options::default().memory(1 << 20).limits(4);
    let r = sluicegate_shm::Region::open(&path, &options).unwrap();
    let policy = |text: &str| {
        Policy::builder()
            .pool(r.pool().clone())
            .from_toml(text)
            .unwrap()
    };
    let rule = |name: &str, limit: &str| {
        format!("[[rule]]\nname = \"{name}\"\nlimit = \"{limit}\"\nkey = [\"ip\"]\n")
    };
    let req = [("ip", "192.0.2.1")];
    let p = policy(&rule("a", "3/hour"));
    assert!(p.check_n_at(&req, 3, 0).allowed());
    // Unchanged: the same entry. A second rule: the second entry.
    p.reload_from_toml(&rule("a", "3/hour")).unwrap();
    let two = format!("{}{}", rule("a", "3/hour"), rule("b", "5/hour"));
    p.reload_from_toml(&two).unwrap();
    assert_eq!(r.pool().limits(), 2);
    // Two more fit; a fifth does not.
    let more = format!(
        "{}{}{}",
        rule("c", "6/hour"),
        rule("d", "7/hour"),
        rule("e", "8/hour")
    );
    let four = format!("{two}{more}");
    let err = p.reload_from_toml(&four).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("rule `e`") && text.contains("holds 4 limits already"),
        "{text}"
    );
    assert!(p.last_error().is_some());
    // The old rules run on, with their state: a's 3 units are spent.
    assert!(!p.check_n_at(&req, 1, 0).allowed());
    // A process starting with the rules that no longer fit is refused at start.
    let fresh = Policy::builder().pool(r.pool().clone()).from_toml(&four);
    assert!(fresh.is_err());
    // Another process with the old rules shares them.
    let q = policy(&two);
    assert!(!q.check_n_at(&req, 1, 0).allowed());
    sluicegate_shm::unlink(&path).unwrap();
}

/// A rule without `key` in a shared policy is one limit for every process too
/// (one word of the region for one quota, one key for several), and the
/// policy's own clock is the region's, so that every process checks at times
/// they all read alike.
#[test]
fn unkeyed_rules_are_shared_and_checked_on_the_regions_clock() {
    let path = region("unkeyed");
    let text = format!(
        "[shared]\npath = \"{path}\"\n\n\
         [[rule]]\nname = \"all\"\nlimit = \"3/hour\"\n\n\
         [[rule]]\nname = \"two\"\nlimit = \"4/hour; 20/day\"\nmatch = {{ path = \"/two\" }}\n"
    );
    let (a, b) = (
        Policy::from_toml(&text).unwrap(),
        Policy::from_toml(&text).unwrap(),
    );
    let req = [("ip", "192.0.2.1")];
    assert!(a.check(&req).allowed() && b.check(&req).allowed() && a.check(&req).allowed());
    assert!(!b.check(&req).allowed() && !a.check(&req).allowed());
    let two = [("path", "/two")];
    // "all" matches too and is spent: nothing more, in either process.
    assert!(!a.check(&two).allowed());
    let fresh = region("unkeyed-2");
    let text = text.replace(&path, &fresh).replace("3/hour", "30/hour");
    let (a, b) = (
        Policy::from_toml(&text).unwrap(),
        Policy::from_toml(&text).unwrap(),
    );
    let admitted = (0..6)
        .filter(|i| if i % 2 == 0 { &a } else { &b }.check(&two).allowed())
        .count();
    assert_eq!(admitted, 4, "two processes' checks of a two-quota rule");
    let (before, now, after) = (sluicegate_shm::now(), a.now(), sluicegate_shm::now());
    assert!(before <= now && now <= after, "the region's clock");
    sluicegate_shm::unlink(&path).unwrap();
    sluicegate_shm::unlink(&fresh).unwrap();
}

/// A keyed rule's key is hashed in the region as its text by the region's own
/// hash (XXH3-64, seeded), never by a hasher whose output may change between
/// versions: a `SharedKeyed` of the same limit (what the C and Python keyed
/// limiters are) finds the policy's key in the same slot.
#[test]
fn a_rules_keys_hash_as_their_text_with_the_regions_hash() {
    use sluicegate::{Kind, Spec};
    let path = region("text");
    let rule = format!(
        "[shared]\npath = \"{path}\"\n\n[[rule]]\nname = \"per-user\"\nlimit = \"3/hour\"\n\
         key = [\"user\", \"ip\"]\ncapacity = 1000\n"
    );
    let p = Policy::from_toml(&rule).unwrap();
    assert!(
        p.check_n_at(&[("user", "ann|x"), ("ip", "192.0.2.1")], 3, 0)
            .allowed()
    );
    let r = sluicegate_shm::Region::open(&path, &Default::default()).unwrap();
    let same = r
        .keyed(&Spec::parse(Kind::TokenBucket, "3/hour").unwrap(), 1000)
        .unwrap();
    // The key's text: values joined by `|`, a `|` in a value escaped.
    assert!(
        !same
            .check_n_at("ann\\|x|192.0.2.1", 1, 0)
            .unwrap()
            .decision
            .allowed
    );
    assert!(
        same.check_n_at("bob|192.0.2.1", 3, 0)
            .unwrap()
            .decision
            .allowed
    );
    assert!(
        !p.check_n_at(&[("user", "bob"), ("ip", "192.0.2.1")], 1, 0)
            .allowed()
    );
    sluicegate_shm::unlink(&path).unwrap();
}

/// A policy's region is opened through the process's cache: a handle opened
/// beside it (a C program's `open_shared` limiter, say) shares its mapping,
/// for as long as the policy keeps only the region's pool.
#[test]
fn a_policy_and_other_handles_on_its_region_share_one_mapping() {
    let path = region("cache");
    let mappings = || {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().filter(|l| l.ends_with(path.as_str())).count()
    };
    let p = Policy::from_toml(&text(&path, "2/hour")).unwrap();
    assert_eq!(mappings(), 1);
    let r = sluicegate_shm::Region::open_cached(&path, &Default::default()).unwrap();
    let again = sluicegate_shm::Region::open_cached(&path, &Default::default()).unwrap();
    assert!(r.same_mapping(&again));
    assert_eq!(mappings(), 1);
    assert!(p.check_n_at(&[("ip", "192.0.2.7")], 2, 0).allowed());
    drop((p, r, again));
    assert_eq!(mappings(), 0);
    sluicegate_shm::unlink(&path).unwrap();
}
