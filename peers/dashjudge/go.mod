// Grafana's dashboard schema as a test judge (its own module: the foundation SDK is needed by nothing
// else in peers/).
module github.com/herald/peers/dashjudge

go 1.26.0

require github.com/grafana/grafana-foundation-sdk/go v0.0.22 // indirect
