package config

// WatchReady makes w close the returned channel once its Run watches the
// files, so that tests need not guess when that is. Call it before Run.
func WatchReady(w *Watcher) <-chan struct{} {
	w.ready = make(chan struct{})
	return w.ready
}
