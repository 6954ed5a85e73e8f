module github.com/ratelimitd/ratelimitd/client

go 1.25.0

require (
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/dunglas/httpsfv v1.1.2
	github.com/google/go-cmp v0.7.0
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.1.0
	github.com/ratelimitd/ratelimitd/gen v0.0.0
	go.uber.org/goleak v1.3.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240318140521-94a12d6c2237
	google.golang.org/grpc v1.64.1
	google.golang.org/protobuf v1.33.0
)

require (
	golang.org/x/net v0.26.0 // indirect
	golang.org/x/sys v0.21.0 // indirect
	golang.org/x/text v0.16.0 // indirect
)

replace github.com/ratelimitd/ratelimitd/gen => ../gen
