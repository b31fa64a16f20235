package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/statuspage"
	"github.com/quicksilver-kv/qs/internal/tree"
)

// TreeDoc is the answer of GET /v1/{db}/tree: the replication tree below
// this node, this node first at depth 0, each node before those that
// replicate from it.
type TreeDoc struct {
	DB    string     `json:"db"`
	Node  string     `json:"node"`
	Nodes []tree.Row `json:"nodes"`
	// Size counts the nodes of the tree, those left out of Nodes by the
	// report bounds included.
	Size int `json:"size"`
}

func treeOf(d *service.Database) TreeDoc {
	var n tree.Node
	if d.Tree != nil {
		n = d.Tree()
	} else {
		n = tree.Node{Name: d.Node, Role: "root", AppliedIndex: d.Store.AppliedIndex()}
	}
	return TreeDoc{DB: d.Name, Node: d.Node, Nodes: tree.Flatten(n), Size: tree.Size(&n)}
}

// tree serves GET /v1/{db}/tree.
func (h *handler) tree(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	if r.URL.RawQuery != "" {
		if _, err := parseQuery(r.URL.RawQuery); err != nil {
			return h.fail(w, r, d, err)
		}
	}
	return h.answerJSON(w, treeOf(d), d.Store.AppliedIndex())
}

// NodeDoc is the answer of GET /v1/node: everything the status page shows.
type NodeDoc struct {
	Node      string     `json:"node"`
	Time      string     `json:"time"`
	Process   ProcessDoc `json:"process"`
	Databases []NodeDB   `json:"databases"`
}

// NodeDB is one database of NodeDoc.
type NodeDB struct {
	Name    string             `json:"name"`
	Status  map[string]any     `json:"status"`
	Tree    TreeDoc            `json:"tree"`
	History []statuspage.Point `json:"history"`
	// Tiers are the cache hit rates of the last minute: the read cache,
	// and for a proxy its own store and its replicas.
	Tiers []statuspage.Tier `json:"tiers"`
	Error string            `json:"error,omitempty"`
}

// node serves GET /v1/node.
func (h *handler) node(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery != "" {
		if _, err := parseQuery(r.URL.RawQuery); err != nil {
			status := h.m.writeError(w, classify(err), err, nil)
			h.m.countOther(status)
			return
		}
	}
	doc := NodeDoc{Time: time.Now().UTC().Format(time.RFC3339Nano), Process: ReadProcess(), Databases: []NodeDB{}}
	if l, ok := h.cat.(Lister); ok {
		for _, name := range l.DatabaseNames() {
			d, ok := h.cat.Database(name)
			if !ok {
				continue
			}
			doc.Node = d.Node
			ndb := NodeDB{Name: name, Tree: treeOf(d), History: []statuspage.Point{}}
			st, err := statusOf(d)
			if err != nil {
				ndb.Error = err.Error()
			}
			ndb.Status = st
			if d.History != nil {
				ndb.History = d.History.Points()
				_, proxy := st["proxy"]
				ndb.Tiers = statuspage.Tiers(ndb.History, proxy)
			}
			doc.Databases = append(doc.Databases, ndb)
		}
	}
	status := h.answerJSON(w, doc, 0)
	h.m.countOther(status)
}

// answerJSON answers 200 with v as JSON; applied, if not 0, goes in the
// Qs-Applied-Index header.
func (h *handler) answerJSON(w http.ResponseWriter, v any, applied uint64) int {
	body, err := json.Marshal(v)
	if err != nil {
		return h.m.writeError(w, codeInternal, err, nil)
	}
	body = append(body, '\n')
	hd := w.Header()
	hd["Content-Type"] = jsonContentType
	hd["Content-Length"] = []string{strconv.Itoa(len(body))}
	if applied != 0 {
		hd["Qs-Applied-Index"] = []string{strconv.FormatUint(applied, 10)}
	}
	w.Write(body)
	return http.StatusOK
}
