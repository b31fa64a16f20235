package pgbridge

import (
	"errors"
	"strings"
	"testing"
)

func TestFieldJSON(t *testing.T) {
	cases := []struct {
		oid  uint32
		f    Field
		want string
	}{
		{oidInt4, Field{Text: "42"}, "42"},
		{oidInt8, Field{Text: "-9007199254740993"}, "-9007199254740993"},
		{oidOID, Field{Text: "4294967295"}, "4294967295"},
		{oidNumeric, Field{Text: "1.50"}, "1.50"},
		{oidNumeric, Field{Text: "NaN"}, `"NaN"`},
		{oidFloat8, Field{Text: "-Infinity"}, `"-Infinity"`},
		{oidFloat8, Field{Text: "1e+100"}, "1e+100"},
		{oidBool, Field{Text: "t"}, "true"},
		{oidBool, Field{Text: "f"}, "false"},
		{oidJSONB, Field{Text: `{"a": [1, 2]}`}, `{"a":[1,2]}`},
		{25, Field{Text: "a \"quoted\" \n line"}, `"a \"quoted\" \n line"`},
		{1184, Field{Text: "2026-01-02 15:04:05+00"}, `"2026-01-02 15:04:05+00"`},
		{25, Field{Null: true}, "null"},
		{oidInt4, Field{Null: true}, "null"},
	}
	for _, c := range cases {
		got, err := FieldJSON(c.oid, c.f)
		if err != nil || string(got) != c.want {
			t.Errorf("FieldJSON(%d, %+v) = %s, %v; want %s", c.oid, c.f, got, err, c.want)
		}
	}
	for _, c := range []struct {
		oid  uint32
		text string
	}{{oidInt4, "4x"}, {oidBool, "maybe"}, {oidJSON, "{"}} {
		if got, err := FieldJSON(c.oid, Field{Text: c.text}); err == nil {
			t.Errorf("FieldJSON(%d, %q) = %s, want an error", c.oid, c.text, got)
		}
	}
}

var testCols = []Column{{"name", 25}, {"ttl", oidInt4}, {"on", oidBool}, {"blob", 25}}

func TestRowJSON(t *testing.T) {
	got, err := RowJSON(testCols, []Field{{Text: "a"}, {Text: "60"}, {Null: true}, {Text: "x"}}, nil)
	if want := `{"name":"a","ttl":60,"on":null,"blob":"x"}`; err != nil || string(got) != want {
		t.Fatalf("RowJSON = %s, %v; want %s", got, err, want)
	}
	// An unchanged large value comes from the current row.
	got, err = RowJSON(testCols, []Field{{Text: "a"}, {Text: "1"}, {Text: "t"}, {Unchanged: true}}, []byte(`{"name":"a","ttl":60,"on":null,"blob":"big"}`))
	if want := `{"name":"a","ttl":1,"on":true,"blob":"big"}`; err != nil || string(got) != want {
		t.Fatalf("RowJSON with an unchanged field = %s, %v; want %s", got, err, want)
	}
	for name, prev := range map[string]string{"no current row": "", "current row lacks it": `{"name":"a"}`, "current row not JSON": "zz"} {
		var p []byte
		if prev != "" {
			p = []byte(prev)
		}
		if got, err := RowJSON(testCols, []Field{{Text: "a"}, {Text: "1"}, {Text: "t"}, {Unchanged: true}}, p); err == nil {
			t.Errorf("%s: RowJSON = %s, want an error", name, got)
		}
	}
	if _, err := RowJSON(testCols, []Field{{Text: "a"}}, nil); err == nil {
		t.Error("a row of the wrong width was encoded")
	}
}

func TestKeyOf(t *testing.T) {
	row := []Field{{Text: "www.example.com."}, {Text: "1"}}
	if k, err := KeyOf("dns/", 0, row); err != nil || k != "dns/www.example.com." {
		t.Fatalf("KeyOf = %q, %v", k, err)
	}
	for _, f := range []Field{{Null: true}, {Unchanged: true}} {
		if _, err := KeyOf("p/", 0, []Field{f}); !errors.Is(err, ErrUnchangedKey) {
			t.Errorf("KeyOf(%+v): %v", f, err)
		}
	}
	if _, err := KeyOf("p/", 3, row); err == nil {
		t.Error("a key column beyond the row was accepted")
	}
}

func TestSplitTableAndSlotNames(t *testing.T) {
	for in, want := range map[string]string{"records": "public.records", "dns.records": "dns.records"} {
		s, tb, err := SplitTable(in)
		if err != nil || s+"."+tb != want {
			t.Errorf("SplitTable(%q) = %s.%s, %v", in, s, tb, err)
		}
	}
	for _, bad := range []string{"", "a.b.c", ".x", "x."} {
		if _, _, err := SplitTable(bad); err == nil {
			t.Errorf("SplitTable(%q) accepted", bad)
		}
	}
	if !ValidSlotName("qs_records") || ValidSlotName("Bad-Name") || ValidSlotName("x; DROP") || ValidSlotName(strings.Repeat("a", 64)) {
		t.Error("ValidSlotName")
	}
}
