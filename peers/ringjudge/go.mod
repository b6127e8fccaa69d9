// The OpenTelemetry target allocator's ring library as a test peer (ringjudge), at the version the
// operator's go.mod pins.
module github.com/herald/peers/ringjudge

go 1.26.7

require (
	github.com/buraksezer/consistent v1.0.0
	github.com/cespare/xxhash/v2 v2.3.0
)
