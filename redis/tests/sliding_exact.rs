//! The sliding window script's exact rule `prev·(W − e) + (cur + n)·W ≤ L·W` where
//! those products pass 2^53 (a double's exact integers): large limits and long
//! windows, with a previous window's count injected into the key (a test cannot
//! wait for a day-long window to turn over). Against the local algorithm where its
//! word holds the limit, and against the formula in 128-bit integers beyond it.

mod common;

use std::time::Duration;

use redis::AsyncCommands;
use sluicegate::{Algorithm as _, Kind, Quota, Sliding};
use sluicegate_redis::{Config, FailurePolicy, Limit, RedisLimiter};

use common::Rng;

const HOUR_NS: u64 = 3_600_000_000_000;

/// The Redis limiter, its key for "k" with the previous window holding `prev`
/// units at `now_us`, and a raw connection.
async fn injected(
    limit: Limit,
    prev: u64,
) -> (RedisLimiter, redis::aio::MultiplexedConnection, u64) {
    let backend = common::standalone();
    let mut raw = common::raw(&backend).await;
    // A local fallback could not hold a share of the largest limits: fail closed.
    let cfg = Config {
        timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        policy: FailurePolicy::Closed,
        ..Config::default()
    };
    let rl = RedisLimiter::new(backend, &common::fresh("sw"), limit, cfg).unwrap();
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    let index = (s * 1_000_000 + us) / limit.emission_interval_us();
    let value = format!("{}:0:{prev}", index - 1);
    let _: () = raw.set(rl.redis_key("k"), value).await.unwrap();
    (rl, raw, index)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_products_decide_like_the_local_algorithm() {
    let run = async {
        // (limit, window): W·L well past 2^53 µs, inside the local word's layout.
        for (i, (l, w_ns)) in [(8_388_607u64, 24 * HOUR_NS), (2_097_151, 3 * HOUR_NS)]
            .into_iter()
            .enumerate()
        {
            let q = Quota::from_nanos(l, w_ns);
            let limit = Limit::from_quota(Kind::SlidingWindow, q).unwrap();
            let p = Sliding::params(&q).unwrap();
            let prev = l - 1 - i as u64;
            let (rl, _raw, index) = injected(limit, prev).await;
            // The same state locally: `prev` units charged in the previous window.
            let mut word = Sliding::decide(&p, 0, (index - 1) * w_ns + 1, prev)
                .next
                .unwrap();
            let mut rng = Rng(0x5EED ^ l);
            for k in 0..200 {
                let n = match rng.below(4) {
                    0 => 1 + rng.below(l),
                    1 => 1 + rng.below(1000),
                    2 => l,
                    _ => 1,
                };
                let peek = rng.below(4) == 0;
                let r = if peek {
                    rl.try_peek_n("k", n).await.unwrap()
                } else {
                    rl.try_check_n("k", n).await.unwrap()
                };
                let step = Sliding::decide(&p, word, r.now_us * 1000, n);
                let (a, b) = (r.decision, step.decision);
                assert!(
                    a.allowed == b.allowed
                        && a.remaining == b.remaining
                        && a.limit == b.limit
                        && (b.retry_after_ns..b.retry_after_ns + 1000).contains(&a.retry_after_ns)
                        && (b.reset_after_ns..b.reset_after_ns + 1000).contains(&a.reset_after_ns),
                    "{l}/{w_ns}ns request {k} (n = {n}, peek = {peek}):\n redis {a:?}\n local {b:?}"
                );
                if !peek {
                    if let Some(next) = step.next {
                        word = next;
                    }
                }
                if k % 50 == 0 {
                    tokio::time::sleep(Duration::from_millis(rng.below(20))).await;
                }
            }
        }
    };
    common::within_a_minute(run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_past_any_local_layout_follow_the_exact_formula() {
    let run = async {
        for (l, w_ns) in [
            (1_000_000_000_000u64, HOUR_NS),
            ((1 << 50) - 1, 24 * HOUR_NS),
        ] {
            let q = Quota::from_nanos(l, w_ns);
            let limit = Limit::from_quota(Kind::SlidingWindow, q).unwrap();
            let w = limit.emission_interval_us() as u128;
            let prev = l - 3;
            let (rl, _raw, index) = injected(limit, prev).await;
            for n in [1, 2, 3, 1_000, l / 2, l] {
                let r = rl.try_peek_n("k", n).await.unwrap();
                let elapsed = r.now_us as u128 - index as u128 * w;
                let weighted = (prev as u128 * (w - elapsed)).div_ceil(w);
                let allowed = prev as u128 * (w - elapsed) + n as u128 * w <= l as u128 * w;
                assert_eq!(r.decision.allowed, allowed, "{l}: n = {n}, {r:?}");
                let left = l as u128 - weighted;
                let remaining = if allowed { left - n as u128 } else { left };
                assert_eq!(
                    r.decision.remaining as u128, remaining,
                    "{l}: n = {n}, {r:?}"
                );
                assert_eq!(r.decision.limit, l);
            }
            // Charged: the script stores the count exactly.
            let r = rl.try_check_n("k", 1).await.unwrap();
            assert!(r.decision.allowed, "{r:?}");
        }
    };
    common::within_a_minute(run).await;
}

/// The script's exact arithmetic, run by the server itself on products around and
/// far past 2^53 (crafted boundaries: exact multiples, one off either side), against
/// 128-bit integers. Random traffic rarely lands on the one-unit boundary where a
/// double's rounding would show; these do by construction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_arithmetic_on_the_server() {
    let src = sluicegate_redis::script::SLIDING_WINDOW_LUA;
    let from = src.find("local B = 262144").unwrap();
    let to = src.find("-- (end of the exact arithmetic)").unwrap();
    let driver = r#"
local out = {}
for i = 1, #ARGV, 3 do
  local a, b, c = ARGV[i] + 0, ARGV[i + 1] + 0, ARGV[i + 2] + 0
  out[#out + 1] = string.format('%d', muldiv(a, b, c))
  out[#out + 1] = string.format('%d', muldiv_ceil(a, b, c))
end
return out
"#;
    let script = format!("{}{driver}", &src[from..to]);
    let mut cases: Vec<(u64, u64, u64)> = Vec::new();
    let mut rng = Rng(0xA11CE);
    let max = 1u64 << 52;
    while cases.len() < 2_000 {
        let bits = |r: &mut Rng| 1 + r.below(52) as u32;
        let (ba, bb, bc) = (bits(&mut rng), bits(&mut rng), bits(&mut rng));
        let a = rng.below(1 << ba);
        let b = rng.below(1 << bb);
        let c = 1 + rng.below(1 << bc);
        let q = a as u128 * b as u128 / c as u128;
        if q + 2 >= max as u128 || a >= max || b >= max {
            continue;
        }
        cases.push((a, b, c));
        // A product that is an exact multiple of c, and one off either side:
        // a·b = q·c, as b' = q·c / a when a divides it.
        if a > 1 && q > 0 {
            let m = q * c as u128;
            if m % a as u128 == 0 && m / (a as u128) < max as u128 {
                cases.push((a, (m / a as u128) as u64, c));
            }
            for (x, y) in [(q as u64, c), (q as u64 + 1, c)] {
                for d in [0i64, -1, 1] {
                    let y2 = y as i64 + d;
                    if y2 > 0 && (y2 as u64) < max && x < max {
                        cases.push((x, y2 as u64, c));
                    }
                }
            }
        }
    }
    let backend = common::standalone();
    let mut raw = common::raw(&backend).await;
    for chunk in cases.chunks(300) {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(&script).arg(0);
        for &(a, b, c) in chunk {
            cmd.arg(a).arg(b).arg(c);
        }
        let got: Vec<String> = cmd.query_async(&mut raw).await.unwrap();
        for (i, &(a, b, c)) in chunk.iter().enumerate() {
            let p = a as u128 * b as u128;
            let (floor, ceil) = (p / c as u128, p.div_ceil(c as u128));
            assert_eq!(got[2 * i], floor.to_string(), "floor({a}·{b}/{c})");
            assert_eq!(got[2 * i + 1], ceil.to_string(), "ceil({a}·{b}/{c})");
        }
    }
}
