module github.com/meshweaver/supervisor

go 1.26.8

require (
	github.com/anthdm/hollywood v1.0.5 // indirect
	github.com/lmittmann/tint v1.2.1 // indirect
	github.com/oklog/run v1.2.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.2 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
