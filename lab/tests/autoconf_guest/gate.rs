//! How many guests cycle at once, and the test's knobs.

/// At most so many guests inside a cycle at once: the others wait for a turn, leases and
/// daemons held.
pub(crate) struct Gate {
    busy: std::sync::Mutex<usize>,
    free: std::sync::Condvar,
    pub(crate) max: usize,
}

/// A guest's turn ([`Gate::enter`]), given back when dropped.
pub(crate) struct Turn<'a>(&'a Gate);

impl Gate {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            busy: std::sync::Mutex::new(0),
            free: std::sync::Condvar::new(),
            max,
        }
    }

    pub(crate) fn enter(&self) -> Turn<'_> {
        let mut busy = self.busy.lock().unwrap();
        while *busy >= self.max {
            busy = self.free.wait(busy).unwrap();
        }
        *busy += 1;
        Turn(self)
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap() -= 1;
        self.0.free.notify_one();
    }
}

/// `var` from the environment, else `default`.
pub(crate) fn knob(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}
