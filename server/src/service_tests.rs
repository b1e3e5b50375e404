//! Unit tests of the service (a file of its own to keep service.rs short).

use super::*;
use crate::rule_set::TableSettings;
use crate::yaml::DescriptorTree;
use envoy_types::pb::google::protobuf::UInt64Value;

#[path = "../tests/common/request.rs"]
mod common_request;
use common_request::request as req;

impl RateLimiter {
    /// One request against the rules in force, as the gRPC method decides it
    /// (run to its end on this thread: these rules are local).
    fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let hits = self.validate(req)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(self.answer(&self.shared.rules(), req, &hits))
    }
}

fn service(headers: bool) -> RateLimiter {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3, name: \"per \\\"k\\\"\"}\n  - key: free\n    rate_limit: {unlimited: true}\n";
    let d = DescriptorTree::from_yaml("s.yaml", yaml).unwrap();
    let tables = TableSettings::new(64, 1 << 20).unwrap();
    let rules = RuleSet::build(
        vec![("s.yaml".into(), crate::rule_set::Source::Yaml(d))],
        None,
        tables.clone(),
    )
    .unwrap();
    RateLimiter::new(Arc::new(Shared::new(
        rules,
        ServiceSettings {
            max_hits_addend: 1000,
            response_headers: headers,
        },
        tables,
    )))
}

#[test]
fn statuses_codes_and_headers() {
    let s = service(true);
    let r = s
        .decide(&req(
            "d",
            &[&[("k", "a")], &[("free", "x")], &[("none", "x")]],
            2,
        ))
        .unwrap();
    assert_eq!(r.overall_code, Code::Ok as i32);
    let st = &r.statuses;
    assert_eq!((st[0].code, st[0].limit_remaining), (Code::Ok as i32, 1));
    let limit = st[0].current_limit.as_ref().unwrap();
    assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (
                3,
                envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit::Hour
                    as i32
            )
        );
    let reset = st[0].duration_until_reset.as_ref().unwrap().seconds;
    assert!((1..=3600).contains(&reset), "{reset}");
    assert_eq!(
        (st[1].limit_remaining, st[1].current_limit.is_none()),
        (u32::MAX, true)
    );
    assert_eq!(
        (
            st[2].code,
            st[2].limit_remaining,
            st[2].current_limit.is_none()
        ),
        (Code::Ok as i32, 0, true)
    );
    let h = &r.response_headers_to_add;
    assert_eq!(
        (h[0].key.as_str(), h[0].value.as_str()),
        ("RateLimit-Policy", "\"per \\\"k\\\"\";q=3;w=3600")
    );
    assert_eq!(h[1].value, format!("\"per \\\"k\\\"\";r=1;t={reset}"));
    let over = s.decide(&req("d", &[&[("k", "a")]], 2)).unwrap();
    assert_eq!(
        (over.overall_code, over.statuses[0].code),
        (Code::OverLimit as i32, Code::OverLimit as i32)
    );
    assert!(service(false)
        .decide(&req("d", &[&[("k", "a")]], 1))
        .unwrap()
        .response_headers_to_add
        .is_empty());
}

#[test]
fn malformed_requests_are_invalid_argument() {
    let s = service(false);
    let cases: Vec<(RateLimitRequest, &str)> = vec![
        (req("", &[&[("k", "a")]], 1), "domain must not be empty"),
        (req("d", &[], 1), "descriptor list must not be empty"),
        (
            req("d", &[&[("k", "a")]], 1001),
            "hits_addend 1001 is larger than this server's maximum 1000",
        ),
        (
            req("d", &[&[("k", "a")], &[]], 1),
            "descriptor 1 has no entries",
        ),
        (req("d", &[&[("", "a")]], 1), "empty key"),
        (
            {
                let mut r = req("d", &[&[("k", "a")]], 1);
                r.descriptors[0].hits_addend = Some(UInt64Value { value: u64::MAX });
                r
            },
            "descriptor 0: hits_addend 18446744073709551615",
        ),
        (
            {
                let mut r = req("d", &[&[("k", "a")]], 1);
                r.descriptors[0].is_negative_hits = true;
                r
            },
            "is_negative_hits",
        ),
    ];
    for (r, want) in cases {
        let e = s.decide(&r).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.message().contains(want),
            "{:?} lacks {want:?}",
            e.message()
        );
    }
    let text = s.shared.render_metrics();
    assert!(
        text.contains("sluicegate_server_malformed_requests_total{reason=\"hits_addend\"} 2"),
        "{text}"
    );
}

#[test]
fn per_descriptor_hits_addend_overrides_and_zero_is_a_peek() {
    let s = service(false);
    let mut r = req("d", &[&[("k", "p")]], 1);
    r.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    assert_eq!(s.decide(&r).unwrap().statuses[0].limit_remaining, 3);
    r.descriptors[0].hits_addend = Some(UInt64Value { value: 3 });
    assert_eq!(s.decide(&r).unwrap().statuses[0].limit_remaining, 0);
    assert_eq!(
        s.decide(&req("d", &[&[("k", "p")]], 0))
            .unwrap()
            .overall_code,
        Code::OverLimit as i32
    );
    // An unknown domain: every descriptor OK, no limit.
    let u = s.decide(&req("elsewhere", &[&[("k", "p")]], 1)).unwrap();
    assert_eq!((u.overall_code, u.statuses.len()), (Code::Ok as i32, 1));
}

#[test]
fn limit_overrides_replace_the_configured_limit() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    let s = service(false);
    let with = |rpu: u32, unit: i32| {
        let mut r = req("d", &[&[("k", "o")]], 1);
        r.descriptors[0].limit = Some(RateLimitOverride {
            requests_per_unit: rpu,
            unit,
        });
        r
    };
    // 1 per minute instead of the configured 3 per hour.
    let first = s.decide(&with(1, 2)).unwrap();
    let st = &first.statuses[0];
    let limit = st.current_limit.as_ref().unwrap();
    assert_eq!(
        (st.code, limit.requests_per_unit, limit.unit),
        (Code::Ok as i32, 1, 2)
    );
    assert_eq!(
        s.decide(&with(1, 2)).unwrap().overall_code,
        Code::OverLimit as i32
    );
    // The configured limit's counter was not touched.
    assert_eq!(
        s.decide(&req("d", &[&[("k", "o")]], 1)).unwrap().statuses[0].limit_remaining,
        2
    );
    // 0 per unit: always over; an unknown unit is the request's fault.
    assert_eq!(
        s.decide(&with(0, 1)).unwrap().overall_code,
        Code::OverLimit as i32
    );
    let e = s.decide(&with(5, 99)).unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("limit override unit 99"),
        "{}",
        e.message()
    );
    // Past MAX_OVERRIDES distinct overrides the server refuses to build more tables.
    let mut refused = None;
    for rpu in 1..=(crate::overrides::MAX_OVERRIDES as u32 + 1) {
        if let Err(e) = s.decide(&with(rpu, 3)) {
            refused = Some(e);
            break;
        }
    }
    let e = refused.unwrap();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(s
        .shared
        .render_metrics()
        .contains("rule_hits_total{rule=\"(override)\",shadow=\"false\",result=\"denied\"} 2"));
}
