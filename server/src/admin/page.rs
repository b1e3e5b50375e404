//! The admin page: static HTML, CSS and JS embedded in the binary (no CDN, no
//! build step), served at `/admin/` without authentication (the page asks for
//! a token and sends it in `Authorization`; no cookie ever carries one). Every
//! file goes out under a strict Content-Security-Policy: scripts and styles
//! from this origin only, nothing inline, no framing.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/admin.js");
const STYLE: &str = include_str!("page/admin.css");

/// The page's Content-Security-Policy.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn file(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `/admin/` and its two files.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/admin", get(|| async { Redirect::permanent("/admin/") }))
        .route(
            "/admin/",
            get(|| async { file("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/admin/admin.js",
            get(|| async { file("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/admin/admin.css",
            get(|| async { file("text/css; charset=utf-8", STYLE) }),
        )
}
