//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`: request checks,
//! decisions through the [`RuleSet`] in force, the response and its optional
//! `RateLimit` / `RateLimit-Policy` headers.

use std::sync::{Arc, RwLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tonic::{Request, Response, Status};

use crate::engine::{Outcome, RuleSet};
use crate::metrics::ServerMetrics;
use crate::overrides::Overrides;

/// Descriptors one request may carry: more is refused as malformed (Envoy sends a
/// handful; a bound keeps one request's work bounded).
pub const MAX_DESCRIPTORS: usize = 64;
/// Entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 64;

/// What the service needs besides the rules.
///
/// ```
/// let s = sluicegate_server::ServiceSettings { max_hits_addend: 1_000, response_headers: true };
/// assert!(s.response_headers);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ServiceSettings {
    /// The largest `hits_addend` accepted; above it the request is INVALID_ARGUMENT.
    pub max_hits_addend: u64,
    /// Add `RateLimit` and `RateLimit-Policy` to `response_headers_to_add`.
    pub response_headers: bool,
}

/// State shared by the gRPC service, the reload task and the metrics endpoint.
#[derive(Debug)]
pub struct Shared {
    rules: RwLock<Arc<RuleSet>>,
    /// Server-wide counters.
    pub metrics: ServerMetrics,
    /// Service behaviour.
    pub settings: ServiceSettings,
    overrides: Overrides,
}

impl Shared {
    /// Shared state starting with `rules`; limit overrides' tables hold
    /// `keys_per_limit` descriptors each.
    pub fn new(rules: RuleSet, settings: ServiceSettings, keys_per_limit: usize) -> Self {
        Self {
            rules: RwLock::new(Arc::new(rules)),
            metrics: ServerMetrics::default(),
            settings,
            overrides: Overrides::new(keys_per_limit),
        }
    }

    /// The rules in force (a snapshot: a reload does not change it under a request).
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts `rules` in force.
    pub fn replace(&self, rules: RuleSet) {
        *self.rules.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(rules);
    }

    /// Every series: the server's and each limit's, in Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let mut out = String::new();
        self.metrics.render(&mut out);
        crate::metrics::render_rule_header(&mut out);
        let now_ns = unix_now_ns();
        let rows = self.rules().metric_rows(now_ns);
        for (rule, shadow, m, _) in &rows {
            crate::metrics::render_rule(&mut out, rule, *shadow, m);
        }
        crate::metrics::render_rule(&mut out, "(override)", false, &self.overrides.metrics);
        crate::metrics::render_table_counts(
            &mut out,
            rows.iter().map(|(rule, _, _, c)| (rule.as_str(), *c)),
        );
        out
    }
}

/// Nanoseconds since the Unix epoch: the clock every limit is decided on, so fixed
/// windows are aligned like envoyproxy/ratelimit's (0 if the clock is before 1970).
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    shared: Arc<Shared>,
}

impl RateLimiter {
    /// A service deciding with `shared`'s rules.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn invalid(&self, reason: &'static str, message: String) -> Status {
        self.shared.metrics.malformed(reason);
        Status::invalid_argument(message)
    }

    /// The hits of each descriptor: its own `hits_addend` if set, else the request's,
    /// 0 meaning 1 (as upstream).
    fn hits(&self, req: &RateLimitRequest) -> Result<Vec<u64>, Status> {
        let max = self.shared.settings.max_hits_addend;
        let request_hits = u64::from(req.hits_addend.max(1));
        if request_hits > max {
            return Err(self.invalid("hits_addend", format!("hits_addend {request_hits} is larger than this server's maximum {max} (--max-hits-addend)")));
        }
        let mut out = Vec::with_capacity(req.descriptors.len());
        for (i, d) in req.descriptors.iter().enumerate() {
            if d.entries.is_empty() {
                return Err(
                    self.invalid("empty_descriptor", format!("descriptor {i} has no entries"))
                );
            }
            if d.entries.len() > MAX_ENTRIES {
                return Err(self.invalid(
                    "too_many_entries",
                    format!(
                        "descriptor {i} has {} entries; at most {MAX_ENTRIES}",
                        d.entries.len()
                    ),
                ));
            }
            if let Some(e) = d.entries.iter().find(|e| e.key.is_empty()) {
                return Err(self.invalid(
                    "empty_key",
                    format!(
                        "descriptor {i} has an entry with an empty key (value {:?})",
                        e.value
                    ),
                ));
            }
            if let Some(l) = &d.limit {
                if let Err(e) = Overrides::unit(l.unit) {
                    return Err(self.invalid("limit_override", format!("descriptor {i}: {e}")));
                }
            }
            if d.is_negative_hits {
                return Err(self.invalid("negative_hits", format!("descriptor {i}: is_negative_hits (refunds) is not supported by sluicegate-server")));
            }
            let n = d.hits_addend.map_or(request_hits, |v| v.value);
            if n > max {
                return Err(self.invalid("hits_addend", format!("descriptor {i}: hits_addend {n} is larger than this server's maximum {max} (--max-hits-addend)")));
            }
            out.push(n);
        }
        Ok(out)
    }

    /// Answers one request (the gRPC method without the transport).
    pub fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if req.domain.is_empty() {
            return Err(self.invalid("empty_domain", "rate limit domain must not be empty".into()));
        }
        if req.descriptors.is_empty() {
            return Err(self.invalid(
                "no_descriptors",
                "rate limit descriptor list must not be empty".into(),
            ));
        }
        if req.descriptors.len() > MAX_DESCRIPTORS {
            return Err(self.invalid(
                "too_many_descriptors",
                format!(
                    "{} descriptors; at most {MAX_DESCRIPTORS}",
                    req.descriptors.len()
                ),
            ));
        }
        let hits = self.hits(req)?;
        let now_ns = unix_now_ns();
        let entries: Vec<&[Entry]> = req
            .descriptors
            .iter()
            .map(|d| d.entries.as_slice())
            .collect();
        let rules = self.shared.rules();
        let headers = self.shared.settings.response_headers;
        let skip: Vec<bool> = req.descriptors.iter().map(|d| d.limit.is_some()).collect();
        let mut outcomes =
            rules.decide_except(&req.domain, &entries, &hits, now_ns, headers, &skip);
        for (i, d) in req.descriptors.iter().enumerate() {
            let (Some(l), Some(slot)) = (&d.limit, outcomes.as_mut().and_then(|o| o.get_mut(i)))
            else {
                continue;
            };
            let unit = Overrides::unit(l.unit).map_err(Status::invalid_argument)?;
            let n = hits.get(i).copied().unwrap_or(1);
            *slot = self
                .shared
                .overrides
                .decide(
                    &req.domain,
                    &d.entries,
                    (l.requests_per_unit, unit),
                    n,
                    now_ns,
                    headers,
                )
                .map_err(Status::resource_exhausted)?;
        }
        let mut resp = RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        };
        let (mut policy, mut remaining) = (Vec::new(), Vec::new());
        let Some(outcomes) = outcomes else {
            for _ in 0..entries.len() {
                self.shared.metrics.no_limit(true);
                resp.statuses.push(DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                });
            }
            return Ok(resp);
        };
        for outcome in outcomes {
            let status = match outcome {
                Outcome::NoLimit => {
                    self.shared.metrics.no_limit(false);
                    DescriptorStatus {
                        code: Code::Ok as i32,
                        ..Default::default()
                    }
                }
                Outcome::Unlimited => DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..Default::default()
                },
                Outcome::Limited(l) => {
                    let code = if l.ok { Code::Ok } else { Code::OverLimit };
                    if !l.ok {
                        resp.overall_code = Code::OverLimit as i32;
                    }
                    if let Some((p, r)) = l.headers {
                        policy.push(p);
                        remaining.push(r);
                    }
                    let reset_secs = l.reset_ns.div_ceil(1_000_000_000);
                    DescriptorStatus {
                        code: code as i32,
                        current_limit: Some(RateLimit {
                            name: l.name.into_owned(),
                            requests_per_unit: l.requests_per_unit,
                            unit: l.unit as i32,
                        }),
                        limit_remaining: u32::try_from(l.remaining).unwrap_or(u32::MAX),
                        duration_until_reset: Some(PbDuration {
                            seconds: i64::try_from(reset_secs).unwrap_or(i64::MAX),
                            nanos: 0,
                        }),
                        ..Default::default()
                    }
                }
            };
            resp.statuses.push(status);
        }
        if !policy.is_empty() {
            for (key, items) in [("RateLimit-Policy", policy), ("RateLimit", remaining)] {
                resp.response_headers_to_add.push(HeaderValue {
                    key: key.into(),
                    value: items.join(", "),
                    ..Default::default()
                });
            }
        }
        Ok(resp)
    }
}

/// A structured-field string (RFC 9651): quoted, `\` and `"` escaped, anything
/// outside printable ASCII replaced by `?`.
pub(crate) fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let start = Instant::now();
        let answer = self.decide(request.get_ref());
        self.shared.metrics.observe_latency(start.elapsed());
        if let Err(status) = &answer {
            tracing::debug!(domain = %request.get_ref().domain, error = %status.message(), "refused a malformed request");
        }
        answer.map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::TableSettings;
    use crate::yaml::Domain;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::google::protobuf::UInt64Value;

    fn service(headers: bool) -> RateLimiter {
        let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3, name: \"per \\\"k\\\"\"}\n  - key: free\n    rate_limit: {unlimited: true}\n";
        let d = Domain::from_yaml("s.yaml", yaml).unwrap();
        let rules = RuleSet::build(
            vec![("s.yaml".into(), crate::engine::Source::Yaml(d))],
            None,
            TableSettings { keys_per_limit: 64 },
        )
        .unwrap();
        RateLimiter::new(Arc::new(Shared::new(
            rules,
            ServiceSettings {
                max_hits_addend: 1000,
                response_headers: headers,
            },
            64,
        )))
    }

    fn req(domain: &str, descriptors: &[&[(&str, &str)]], hits: u32) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            hits_addend: hits,
            descriptors: descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .iter()
                        .map(|(k, v)| Entry {
                            key: (*k).into(),
                            value: (*v).into(),
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
        }
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
}
