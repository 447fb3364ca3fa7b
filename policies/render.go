package policies

import (
	"bytes"
	"strconv"

	"gopkg.in/yaml.v3"
)

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
func integer(n int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(n, 10)}
}
func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}
func size(n int64) *yaml.Node {
	if s := FormatSize(n); s != strconv.FormatInt(n, 10) {
		return str(s)
	}
	return integer(n)
}

func strs(v []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, s := range v {
		n.Content = append(n.Content, str(s))
	}
	return n
}

type mapNode struct{ n *yaml.Node }

func newMap() mapNode { return mapNode{&yaml.Node{Kind: yaml.MappingNode}} }

func (m mapNode) add(k string, v *yaml.Node) mapNode {
	m.n.Content = append(m.n.Content, str(k), v)
	return m
}

// render writes the canonical document of a compiled policy.
func render(p *Policy) []byte {
	src := newMap().add("catalog", str(p.source.Catalog)).add("table", str(p.source.Table))
	t := p.target
	tgt := newMap().add("database", str(t.Database)).add("table", str(t.Table)).
		add("buckets", integer(int64(t.Buckets))).add("bucketing", str(t.Bucketing))
	if t.PrimaryKey != nil {
		tgt.add("primaryKey", strs(t.PrimaryKey))
	}
	tgt.add("createIfMissing", boolean(t.CreateIfMissing)).add("replicationFactor", integer(int64(t.ReplicationFactor)))

	spec := newMap().add("source", src.n).add("target", tgt.n)
	if sel := renderSelection(p.sel); sel != nil {
		spec.add("selection", sel)
	}
	trg := newMap()
	if s := p.triggers.Schedule; s != nil {
		trg.add("schedule", newMap().add("cron", str(s.Cron)).add("timeZone", str(s.TimeZone)).n)
	}
	trg.add("onLakeCommit", boolean(p.triggers.OnLakeCommit)).add("onRequest", boolean(p.triggers.OnRequest))
	spec.add("triggers", trg.n)
	spec.add("limits", newMap().
		add("concurrentPromotions", integer(int64(p.limits.ConcurrentPromotions))).
		add("buildWorkers", integer(int64(p.limits.BuildWorkers))).
		add("uploadMBps", integer(p.uploadMB)).
		add("memory", size(p.limits.MemoryBytes)).n)
	spec.add("duplicateKeys", str(p.dupKeys))

	doc := newMap().add("apiVersion", str(APIVersion)).add("kind", str(Kind)).
		add("metadata", newMap().add("name", str(p.name)).n).
		add("spec", spec.n)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc.n); err != nil {
		// Encoding nodes built from validated strings cannot fail; a failure
		// is a bug in this package.
		panic("policies: render: " + err.Error())
	}
	if err := enc.Close(); err != nil {
		panic("policies: render: " + err.Error())
	}
	return b.Bytes()
}

func renderSelection(s Selection) *yaml.Node {
	sel := newMap()
	parts := newMap()
	if len(s.Where) > 0 {
		where := newMap()
		var field mapNode
		for i, c := range s.Where {
			if i == 0 || s.Where[i-1].Field != c.Field {
				field = newMap()
				field.n.Style = yaml.FlowStyle
				where.add(c.Field, field.n)
			}
			if c.Op == "in" || c.Op == "notIn" {
				field.add(c.Op, strs(c.Values))
			} else {
				field.add(c.Op, str(c.Values[0]))
			}
		}
		parts.add("where", where.n)
	}
	if w := s.Window; w != nil {
		win := newMap().add("field", str(w.Field)).add("last", str(w.Last)).add("anchor", str(w.Anchor))
		win.n.Style = yaml.FlowStyle
		parts.add("window", win.n)
	}
	if len(s.Names) > 0 {
		parts.add("names", strs(s.Names))
	}
	if len(parts.n.Content) > 0 {
		sel.add("partitions", parts.n)
	}
	if s.MinRows > 0 {
		sel.add("minRows", integer(s.MinRows))
	}
	if s.MaxRows > 0 {
		sel.add("maxRows", integer(s.MaxRows))
	}
	if s.MinBytes > 0 {
		sel.add("minBytes", size(s.MinBytes))
	}
	if s.MaxBytes > 0 {
		sel.add("maxBytes", size(s.MaxBytes))
	}
	if len(sel.n.Content) == 0 {
		return nil
	}
	return sel.n
}
