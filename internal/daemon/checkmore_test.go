package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckReadsKafkaTLSFiles: --check reads every file a config names, and
// so the Kafka TLS files too (changelog.kafka.tls of thaw server and thaw
// tablet, kafka.tls of thaw promoter): it passed a config whose start then
// failed on a missing CA bundle.
func TestCheckReadsKafkaTLSFiles(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nonexistent", "kafka-ca.pem")
	kafka := "{brokers: [\"127.0.0.1:9092\"], tls: {ca_file: " + missing + "}}"
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var tab TabletConfig
	if err := LoadConfig(write("tablet.yaml", "id: ts-1\ndata_dir: "+filepath.Join(dir, "d")+"\nobject_store: file://"+filepath.Join(dir, "r")+
		"\netcd: {endpoints: [\"http://127.0.0.1:2379\"]}\nchangelog: {kafka: "+kafka+"}\n"), &tab); err != nil {
		t.Fatal(err)
	}
	var srv ServerConfig
	if err := LoadConfig(write("server.yaml", "data_dir: "+filepath.Join(dir, "s")+"\nchangelog: {kafka: "+kafka+"}\n"), &srv); err != nil {
		t.Fatal(err)
	}
	pcfg := promoterTestConfig(t)
	pcfg.Kafka = &KafkaConfig{Brokers: []string{"127.0.0.1:9092"}, Topic: "thaw-control", TLS: &KafkaTLSConfig{CAFile: missing}}
	for name, err := range map[string]error{"tablet": tab.CheckFiles(), "server": srv.CheckFiles(), "promoter": pcfg.CheckFiles()} {
		if err == nil || !strings.Contains(err.Error(), "kafka-ca.pem") {
			t.Errorf("%s --check with a missing Kafka CA bundle: %v", name, err)
		}
	}
}

// TestEtcdMixedSchemes: an endpoint list mixing http:// and https:// is
// refused whichever comes first; with https:// second it was accepted and
// dialled without TLS (the client takes its credentials from the first).
func TestEtcdMixedSchemes(t *testing.T) {
	for _, eps := range [][]string{
		{"https://10.0.0.1:2379", "http://10.0.0.2:2379"},
		{"http://10.0.0.1:2379", "https://10.0.0.2:2379"},
	} {
		var c EtcdConfig
		c.defaults()
		c.Endpoints = eps
		if err := c.validate(); err == nil {
			t.Errorf("mixed http/https endpoints %v accepted", eps)
		}
	}
}
