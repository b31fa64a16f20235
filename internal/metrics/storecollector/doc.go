// Package storecollector exports the metrics of the process's open stores
// to Prometheus. A store counts for itself ((*store.Store).Metrics returns
// a snapshot, as a Pebble DB's Metrics does); this collector, registered
// with the process registry, reads the snapshot of every store added to
// it at each scrape and turns it into the qs_store_* families, one series
// per database (label db).
//
// Invariants: the families, their help texts, types, labels and histogram
// buckets are those the dashboard and the alert rules name
// (testdata/root_families.txt lists a root store's); a store's engine is
// read only while it is open (store.Metrics leaves it out after Close);
// one series per database name, the first store added of that name.
package storecollector
