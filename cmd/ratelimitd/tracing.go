package main

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// startTracing returns the tracer provider --otlp-endpoint asks for, nil
// when tracing is off, and a function that flushes and stops it.
func startTracing(ctx context.Context, f tracingFlags) (trace.TracerProvider, func(*slog.Logger), error) {
	if f.endpoint == "" {
		return nil, func(*slog.Logger) {}, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(f.endpoint)}
	if f.insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exporter, err := otlptracegrpc.New(ctx, opts...) // connects lazily
	if err != nil {
		return nil, nil, err
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read last, win.
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName("ratelimitd"), semconv.ServiceVersion(version())),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(f.sampleRatio))),
	)
	stop := func(log *slog.Logger) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}
	return tp, stop, nil
}
