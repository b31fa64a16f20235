package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/quicksilver-kv/qs/internal/service"
)

// overlayCatalog is a catalog whose node is (or is not) a gossip member.
type overlayCatalog struct {
	service.Databases
	list   any
	member bool
}

func (c overlayCatalog) Members() (any, bool) { return c.list, c.member }

// GET /v1/members: the overlay's member list when the node is a member;
// 404 not_found with a clear message when it is not, or when the catalog
// knows of no overlay at all; other methods 405.
func TestOverlayMembersEndpoint(t *testing.T) {
	get := func(cat service.Catalog, method string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		New(Config{}, cat, nil).ServeHTTP(w, httptest.NewRequest(method, "/v1/members", nil))
		return w
	}
	w := get(overlayCatalog{list: map[string]any{"self": "a", "members": []any{map[string]any{"name": "a"}}}, member: true}, http.MethodGet)
	var out struct {
		Self    string           `json:"self"`
		Members []map[string]any `json:"members"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &out) != nil || out.Self != "a" || len(out.Members) != 1 {
		t.Fatalf("member: %d %s", w.Code, w.Body)
	}
	for name, cat := range map[string]service.Catalog{"not a member": overlayCatalog{}, "no overlay": service.Databases{}} {
		w := get(cat, http.MethodGet)
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if w.Code != http.StatusNotFound || json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error.Code != "not_found" || e.Error.Message == "" {
			t.Errorf("%s: %d %s", name, w.Code, w.Body)
		}
	}
	if w := get(overlayCatalog{member: true}, http.MethodPost); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", w.Code)
	}
}
