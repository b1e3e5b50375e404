//! Rust futures as asyncio futures, run on a Redis limiter's own Tokio runtime.
//!
//! `pyo3-async-runtimes` turns a future into an asyncio future
//! (`generic::future_into_py_with_locals`) for any runtime that implements its
//! `generic::Runtime`. Its ready-made Tokio one runs every future on one global
//! runtime of its own; `Home` instead spawns on the runtime current where it is
//! called, which `spawn` below makes the limiter's (the blocking limiter's
//! private runtime: the one its connection's driver task, its timers and its
//! coalescing tasks live on, shared with the blocking calls), so a check is
//! polled where its connection is driven and no other runtime is started (the
//! global one of `pyo3_async_runtimes::tokio` never is).
//!
//! The hand-over of a result to asyncio needs the GIL, which `pyo3-async-runtimes`
//! takes in `Runtime::spawn_blocking`: `Home` runs those on one completer thread
//! (`sluicegate-aio`), several per GIL acquisition when they queue up (as 1000
//! concurrent checks do), instead of a blocking-pool thread each, all contending
//! for the GIL. So no Tokio thread ever runs Python code: the Python references
//! its tasks let go of are released by pyo3 later, under the GIL, on another
//! thread. (Freeing the last reference to a limiter drops its runtime, which Tokio
//! refuses to do inside that runtime's own context.)

use std::future::Future;
use std::pin::Pin;
use std::sync::{mpsc, Mutex, PoisonError};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3_async_runtimes::generic::{self, ContextExt};
use pyo3_async_runtimes::TaskLocals;
use tokio::runtime::Handle;
use tokio::task::JoinError;

/// A spawned future: Tokio's `JoinHandle`, or an already finished one for the
/// completer's work (nobody awaits that).
type Join = Pin<Box<dyn Future<Output = Result<(), JoinError>> + Send>>;

/// The most completions run under one GIL acquisition: bounds how long the
/// completer keeps the GIL from the event loop.
const BATCH: usize = 256;

type Job = Box<dyn FnOnce() + Send>;

/// The completer thread's queue, the thread started on first use in this process
/// (a forked child has none of its parent's threads, so it starts its own); None
/// if it could not be started (`spawn` then raises rather than hand out futures
/// that would never complete).
fn completer() -> Option<mpsc::Sender<Job>> {
    static CURRENT: Mutex<Option<(u32, mpsc::Sender<Job>)>> = Mutex::new(None);
    let mut current = CURRENT.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    if let Some((p, tx)) = current.as_ref() {
        if *p == pid {
            return Some(tx.clone());
        }
    }
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("sluicegate-aio".into())
        .spawn(move || {
            // Waits without the GIL; then runs what queued meanwhile, up to BATCH,
            // under one acquisition (each job's own `Python::attach` nests in it for
            // nothing). An interpreter shutting down cannot be attached to: its
            // loops are gone, and the job is dropped unrun.
            while let Ok(first) = rx.recv() {
                let rx = &rx;
                let _ = Python::try_attach(move |_py| {
                    run(first);
                    for job in rx.try_iter().take(BATCH - 1) {
                        run(job);
                    }
                });
            }
        })
        .ok()?;
    *current = Some((pid, tx.clone()));
    Some(tx)
}

/// One job; a panic in it stays in it (the thread must go on).
fn run(job: Job) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
}

/// `pyo3-async-runtimes`' runtime, on the Tokio runtime current where it spawns.
struct Home;

impl generic::Runtime for Home {
    type JoinError = JoinError;
    type JoinHandle = Join;

    fn spawn<F>(fut: F) -> Join
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // Called by `future_into_py` (inside its `enter`) and then from the tasks
        // it spawned, which run on that runtime.
        Box::pin(Handle::current().spawn(fut))
    }

    fn spawn_blocking<F>(f: F) -> Join
    where
        F: FnOnce() + Send + 'static,
    {
        // Only the hand-over to asyncio (it takes the GIL): to the completer, which
        // `spawn` made sure of.
        if let Some(tx) = completer() {
            let _ = tx.send(Box::new(f));
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

impl ContextExt for Home {
    fn scope<F, R>(_locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        // The futures here never call back into Python: no task locals to carry.
        Box::pin(fut)
    }

    fn get_task_locals() -> Option<TaskLocals> {
        None
    }
}

/// An asyncio future (of the running loop) of `fut`'s result, `fut` spawned on
/// `rt` as a task of its own. Cancelling the asyncio future abandons the wait, not
/// the task: `fut` runs on to its end and its result is dropped. (Dropped halfway
/// instead, a Redis call could leave the limiter's half-open circuit breaker
/// waiting for a probe's answer that never comes.) Without a running asyncio loop
/// this fails before `fut` is spawned.
pub fn spawn<'py, F, T>(py: Python<'py>, rt: &Handle, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    // No contextvars copy: the result is handed over by a loop callback, and the
    // future never runs Python code.
    let locals = TaskLocals::with_running_loop(py)?;
    if completer().is_none() {
        return Err(PyRuntimeError::new_err(
            "cannot start the sluicegate-aio thread that completes async checks",
        ));
    }
    let _in = rt.enter();
    let task = rt.spawn(fut);
    generic::future_into_py_with_locals::<Home, _, T>(py, locals, async move {
        match task.await {
            Ok(v) => v,
            Err(e) if e.is_panic() => Err(PyRuntimeError::new_err(format!(
                "the Redis call panicked: {}",
                panic_message(e.into_panic())
            ))),
            Err(_) => Err(PyRuntimeError::new_err(
                "the Redis limiter's runtime shut down before the call ended",
            )),
        }
    })
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    match p.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p
            .downcast_ref::<&str>()
            .map_or_else(|| "(no message)".to_owned(), |s| (*s).to_owned()),
    }
}

/// The runtime that polls `Policy.check_async`'s futures once they wait: one
/// current-thread Tokio runtime per process, driven by its own thread
/// (`sluicegate-policy`), started on first use (a forked child has none of its
/// parent's threads, so it starts its own; the parent's handle is let go).
/// Its tasks only await round trips that run on their rules' own runtimes, and
/// give back local charges when dropped, so one thread is plenty and needs no
/// timer or I/O driver.
fn driver() -> Option<Handle> {
    static CURRENT: Mutex<Option<(u32, Handle)>> = Mutex::new(None);
    let mut current = CURRENT.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    if let Some((p, h)) = current.as_ref() {
        if *p == pid {
            return Some(h.clone());
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread().build().ok()?;
    let handle = rt.handle().clone();
    std::thread::Builder::new()
        .name("sluicegate-policy".into())
        .spawn(move || rt.block_on(std::future::pending::<()>()))
        .ok()?;
    *current = Some((pid, handle.clone()));
    Some(handle)
}

/// An asyncio future (of the running loop) of `fut`'s result, `fut` polled on
/// the policy driver (`driver`). Unlike [`spawn`], cancelling the asyncio
/// future drops `fut` (`pyo3-async-runtimes` cancels it when polled next): a
/// policy check's drop guard then gives back what its local rules charged.
/// The round trips it awaits run on their rules' runtimes either way.
pub fn drive<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let locals = TaskLocals::with_running_loop(py)?;
    let (Some(_), Some(rt)) = (completer(), driver()) else {
        return Err(PyRuntimeError::new_err(
            "cannot start the threads that complete async policy checks",
        ));
    };
    let _in = rt.enter();
    generic::future_into_py_with_locals::<Home, _, T>(py, locals, fut)
}
