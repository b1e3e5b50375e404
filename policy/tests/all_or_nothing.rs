//! All-or-nothing across rules under races: threads check requests that match
//! several enforcing rules (keyed and keyless, three algorithms, compound
//! limits); every rule must end holding exactly the units of the requests the
//! policy admitted (a denial consumed nothing anywhere: no refund lost or
//! doubled) and never more than its quota (no over-admission).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sluicegate_policy::Policy;

const RULES: &str = r#"
[[rule]]
name = "per-ip"
key = ["ip"]
limit = "50/minute"
algorithm = "fixed_window"

[[rule]]
name = "global"
limit = "120/minute; 500/hour"
algorithm = "sliding_window"

[[rule]]
name = "per-user"
match = { method = ["GET", "POST"] }
key = ["user"]
limit = "40/minute"
algorithm = "token_bucket"

[[rule]]
name = "not-this-one"
match = { method = "DELETE" }
limit = "1/minute"
"#;

/// Units each rule holds for one request's key at `now`, by a peek (cost 0).
fn used(p: &Policy, ip: &str, user: &str) -> HashMap<String, u64> {
    let d = p.check_n_at(&[("ip", ip), ("user", user), ("method", "GET")], 0, 0);
    d.rules()
        .map(|r| (r.name.to_owned(), r.limit - r.remaining))
        .collect()
}

#[test]
fn a_denial_consumes_nothing_under_races() {
    for round in 0..4u64 {
        let p = Policy::from_toml(RULES).unwrap();
        let ips = ["192.0.2.1", "192.0.2.2", "2001:db8::1"];
        let users = ["u1", "u2"];
        let admitted: Mutex<HashMap<(usize, usize), u64>> = Mutex::new(HashMap::new());
        let total = AtomicU64::new(0);
        std::thread::scope(|s| {
            for th in 0..4u64 {
                let (p, admitted, total) = (&p, &admitted, &total);
                s.spawn(move || {
                    let mut x = round * 7919 + th * 104_729 + 1;
                    for _ in 0..600 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let (i, u) = ((x % 3) as usize, ((x >> 8) % 2) as usize);
                        let n = 1 + (x >> 16) % 3;
                        let method = if (x >> 20) % 2 == 0 { "GET" } else { "POST" };
                        let req = [("ip", ips[i]), ("user", users[u]), ("method", method)];
                        let d = p.check_n_at(&req, n, 0);
                        assert_eq!(d.rules().count(), 3);
                        if d.allowed() {
                            *admitted.lock().unwrap().entry((i, u)).or_default() += n;
                            total.fetch_add(n, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let admitted = admitted.into_inner().unwrap();
        let total = total.into_inner();
        assert!(total > 0 && total <= 120, "round {round}: {total}");
        for (i, ip) in ips.iter().enumerate() {
            let by_ip: u64 = (0..2)
                .map(|u| admitted.get(&(i, u)).copied().unwrap_or(0))
                .sum();
            assert!(by_ip <= 50);
            assert_eq!(used(&p, ip, "u1")["per-ip"], by_ip, "round {round}, {ip}");
        }
        for (u, user) in users.iter().enumerate() {
            let by_user: u64 = (0..3)
                .map(|i| admitted.get(&(i, u)).copied().unwrap_or(0))
                .sum();
            assert!(by_user <= 40);
            assert_eq!(
                used(&p, ips[0], user)["per-user"],
                by_user,
                "round {round}, {user}"
            );
        }
        assert_eq!(used(&p, ips[0], users[0])["global"], total, "round {round}");
    }
}

#[test]
fn a_later_rule_denying_gives_back_the_earlier_ones() {
    let p = Policy::from_toml(RULES).unwrap();
    let req = [("ip", "192.0.2.9"), ("user", "v"), ("method", "GET")];
    // per-user (40) runs out first; per-ip and global, checked before it, must
    // not keep the denied request's units.
    assert!(p.check_n_at(&req, 3, 0).allowed());
    for _ in 0..12 {
        assert!(p.check_n_at(&req, 3, 0).allowed());
    }
    let d = p.check_n_at(&req, 3, 0); // 39 + 3 > 40
    assert!(!d.allowed());
    assert_eq!(
        d.denying().map(|r| r.name).collect::<Vec<_>>(),
        ["per-user"]
    );
    let u = used(&p, "192.0.2.9", "v");
    assert_eq!((u["per-ip"], u["global"], u["per-user"]), (39, 39, 39));
}
