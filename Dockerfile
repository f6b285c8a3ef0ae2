# The operator image: the manager and the opr8r-step runner, static, on a
# distroless base, as non-root. Steps that run in a stock Terraform or
# OpenTofu image get opr8r-step from this image through an init container
# (`opr8r-step install`), so those images need nothing but terraform/tofu.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/manager ./cmd/manager && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/opr8r-step ./cmd/opr8r-step

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/manager /manager
COPY --from=build /out/opr8r-step /opr8r-step
USER 65532:65532
ENTRYPOINT ["/manager"]
