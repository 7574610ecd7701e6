package cli

import "testing"

// TestKeyFileStaysLocal: the data directory's key is sent to --server only
// when it names this machine.
func TestKeyFileStaysLocal(t *testing.T) {
	t.Parallel()
	for url, local := range map[string]bool{
		"http://127.0.0.1:9371": true, "http://localhost:9371": true, "http://[::1]:9371/": true, "http://127.0.0.2": true,
		"https://cyrnel.example.com": false, "http://10.0.0.5:9371": false, "http://localhost.evil.com": false, "::bad": false,
	} {
		if got := isLoopback(url); got != local {
			t.Errorf("isLoopback(%q) = %v, want %v", url, got, local)
		}
	}
}
