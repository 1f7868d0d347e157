//! Building the map's cells off the UI thread ("fragprobe-map"): with a million live
//! regions a rebuild takes tens of milliseconds, so while the model changes (loading,
//! playing, scrubbing) the window keeps drawing the last finished cells and swaps in the
//! new ones when they are ready. [`Worker`] is the general mechanism.

use std::sync::{Arc, Condvar, Mutex};

use super::cells::{Cells, ColourBy};
use crate::pipeline::space::RegionView;

/// Feeds every region of one window to the given sink (runs on the worker thread; it
/// takes whatever lock it needs itself).
pub type Job = Box<dyn FnOnce(&mut dyn FnMut(&RegionView)) + Send>;

/// What to build.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// First address.
    pub lo: u64,
    /// One past the last address.
    pub hi: u64,
    /// Cells.
    pub n: usize,
    /// Colouring.
    pub colour: ColourBy,
    /// Age colouring range.
    pub age_range: (u64, u64),
}

/// A finished build.
pub struct Built<K> {
    /// Whatever identifies the request (the map's cache key).
    pub key: K,
    /// The cells.
    pub cells: Cells,
    /// Each cell's colour.
    pub colours: Vec<egui::Color32>,
}

/// Builds cells synchronously; `job` feeds the regions.
pub fn build<K>(key: K, req: &Request, job: impl FnOnce(&mut dyn FnMut(&RegionView))) -> Built<K> {
    let mut cells = Cells::new(req.lo, req.hi, req.n);
    job(&mut |r| cells.add(r));
    let colours = (0..req.n)
        .map(|i| cells.colour(i, req.colour, req.age_range))
        .collect();
    Built {
        key,
        cells,
        colours,
    }
}

/// The posted work not started yet, and whether to stop.
struct Todo<K, T> {
    next: Option<(K, Work<T>)>,
    stop: bool,
}

struct Shared<K, T> {
    todo: Mutex<Todo<K, T>>,
    cv: Condvar,
    done: Mutex<Option<(K, T)>>,
}

/// Work for a [`Worker`].
pub type Work<T> = Box<dyn FnOnce() -> T + Send>;

/// A named background thread that runs the latest posted work and keeps its result;
/// dropping it stops the thread. The map builds its cells with one, the viewer its list
/// of spaces with another.
pub struct Worker<K: Send + 'static, T: Send + 'static> {
    shared: Arc<Shared<K, T>>,
}

impl<K: Send + 'static, T: Send + 'static> Worker<K, T> {
    /// Starts the thread; `ctx` is asked to repaint when work finishes.
    pub fn start(name: &str, ctx: egui::Context) -> std::io::Result<Worker<K, T>> {
        let shared = Arc::new(Shared {
            todo: Mutex::new(Todo {
                next: None,
                stop: false,
            }),
            cv: Condvar::new(),
            done: Mutex::new(None),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                let next = {
                    let Ok(mut t) = s.todo.lock() else { return };
                    while t.next.is_none() && !t.stop {
                        t = match s.cv.wait(t) {
                            Ok(t) => t,
                            Err(_) => return,
                        };
                    }
                    if t.stop {
                        return;
                    }
                    t.next.take()
                };
                if let Some((key, work)) = next {
                    let out = work();
                    if let Ok(mut d) = s.done.lock() {
                        *d = Some((key, out));
                    }
                    ctx.request_repaint();
                }
            })?;
        Ok(Worker { shared })
    }

    /// Asks for `work`, replacing any work not started yet.
    pub fn post(&self, key: K, work: Work<T>) {
        if let Ok(mut t) = self.shared.todo.lock() {
            t.next = Some((key, work));
            self.shared.cv.notify_one();
        }
    }

    /// The latest finished result, if a new one arrived.
    pub fn take(&self) -> Option<(K, T)> {
        self.shared.done.lock().ok()?.take()
    }
}

impl<K: Send + 'static, T: Send + 'static> Drop for Worker<K, T> {
    fn drop(&mut self) {
        if let Ok(mut t) = self.shared.todo.lock() {
            t.stop = true;
            self.shared.cv.notify_one();
        }
    }
}

/// A [`Worker`] started on first use, with the key posted to it last: what the map and
/// the space list keep to build off the UI thread.
pub struct Background<K: Send + 'static, T: Send + 'static> {
    worker: Option<Worker<K, T>>,
    pending: Option<K>,
}

impl<K: Send + 'static, T: Send + 'static> Default for Background<K, T> {
    fn default() -> Self {
        Background {
            worker: None,
            pending: None,
        }
    }
}

impl<K: Clone + PartialEq + Send + 'static, T: Send + 'static> Background<K, T> {
    /// Whether the thread runs, starting it (named `name`) if it does not yet.
    pub fn start(&mut self, name: &str, ctx: &egui::Context) -> bool {
        if self.worker.is_none() {
            self.worker = Worker::start(name, ctx.clone()).ok();
        }
        self.worker.is_some()
    }

    /// Posts the work `make` makes for `key` unless `key` was posted last, and returns the
    /// latest finished result, if a new one arrived (nothing before [`Background::start`]).
    pub fn request(&mut self, key: &K, make: impl FnOnce() -> Work<T>) -> Option<(K, T)> {
        let w = self.worker.as_ref()?;
        if self.pending.as_ref() != Some(key) {
            w.post(key.clone(), make());
            self.pending = Some(key.clone());
        }
        w.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::space::RegionKind;

    #[test]
    fn the_worker_builds_what_was_posted_last() {
        let w: Worker<u32, Built<u32>> =
            Worker::start("test-map", egui::Context::default()).unwrap();
        let req = Request {
            lo: 0,
            hi: 100,
            n: 10,
            colour: ColourBy::Kind,
            age_range: (0, 1),
        };
        let job = |size: u64| -> Job {
            Box::new(move |f: &mut dyn FnMut(&RegionView)| {
                f(&RegionView {
                    addr: 0,
                    size,
                    kind: RegionKind::Plain,
                    ts_ns: 0,
                })
            })
        };
        let r1 = req.clone();
        w.post(1, Box::new(move || build(1, &r1, job(10))));
        w.post(2, Box::new(move || build(2, &req, job(50))));
        let mut last = None;
        for _ in 0..500 {
            if let Some((_, b)) = w.take() {
                last = Some((b.key, b.cells.used(4)));
                if b.key == 2 {
                    break;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(
            last,
            Some((2, 1.0)),
            "the last request is built (cell 4 is covered)"
        );
    }

    #[test]
    fn background_posts_a_key_once_and_hands_back_its_result() {
        let mut bg: Background<u32, u32> = Background::default();
        assert!(bg.request(&1, || Box::new(|| 10)).is_none(), "not started");
        assert!(bg.start("test-bg", &egui::Context::default()));
        let mut got = None;
        for _ in 0..500 {
            // Asked every frame: only the first call posts.
            got = got.or(bg.request(&1, || Box::new(|| 10)));
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(got, Some((1, 10)));
        assert!(bg.request(&1, || panic!("posted twice")).is_none());
    }
}
