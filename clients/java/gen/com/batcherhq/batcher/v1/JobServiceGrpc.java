package com.batcherhq.batcher.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * JobService runs durable batch jobs: a caller hands over thousands to
 * millions of items and walks away. Items go through the same core as online
 * requests, at background priority. A job survives restarts and kill -9: its
 * finished items are never redone and its unfinished ones run again.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: batcher/v1/jobs.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class JobServiceGrpc {

  private JobServiceGrpc() {}

  public static final String SERVICE_NAME = "batcher.v1.JobService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.CreateJobRequest,
      com.batcherhq.batcher.v1.CreateJobResponse> getCreateJobMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CreateJob",
      requestType = com.batcherhq.batcher.v1.CreateJobRequest.class,
      responseType = com.batcherhq.batcher.v1.CreateJobResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.CLIENT_STREAMING)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.CreateJobRequest,
      com.batcherhq.batcher.v1.CreateJobResponse> getCreateJobMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.CreateJobRequest, com.batcherhq.batcher.v1.CreateJobResponse> getCreateJobMethod;
    if ((getCreateJobMethod = JobServiceGrpc.getCreateJobMethod) == null) {
      synchronized (JobServiceGrpc.class) {
        if ((getCreateJobMethod = JobServiceGrpc.getCreateJobMethod) == null) {
          JobServiceGrpc.getCreateJobMethod = getCreateJobMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.CreateJobRequest, com.batcherhq.batcher.v1.CreateJobResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.CLIENT_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CreateJob"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.CreateJobRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.CreateJobResponse.getDefaultInstance()))
              .setSchemaDescriptor(new JobServiceMethodDescriptorSupplier("CreateJob"))
              .build();
        }
      }
    }
    return getCreateJobMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.GetJobRequest,
      com.batcherhq.batcher.v1.GetJobResponse> getGetJobMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetJob",
      requestType = com.batcherhq.batcher.v1.GetJobRequest.class,
      responseType = com.batcherhq.batcher.v1.GetJobResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.GetJobRequest,
      com.batcherhq.batcher.v1.GetJobResponse> getGetJobMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.GetJobRequest, com.batcherhq.batcher.v1.GetJobResponse> getGetJobMethod;
    if ((getGetJobMethod = JobServiceGrpc.getGetJobMethod) == null) {
      synchronized (JobServiceGrpc.class) {
        if ((getGetJobMethod = JobServiceGrpc.getGetJobMethod) == null) {
          JobServiceGrpc.getGetJobMethod = getGetJobMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.GetJobRequest, com.batcherhq.batcher.v1.GetJobResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetJob"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.GetJobRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.GetJobResponse.getDefaultInstance()))
              .setSchemaDescriptor(new JobServiceMethodDescriptorSupplier("GetJob"))
              .build();
        }
      }
    }
    return getGetJobMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.ListJobsRequest,
      com.batcherhq.batcher.v1.ListJobsResponse> getListJobsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListJobs",
      requestType = com.batcherhq.batcher.v1.ListJobsRequest.class,
      responseType = com.batcherhq.batcher.v1.ListJobsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.ListJobsRequest,
      com.batcherhq.batcher.v1.ListJobsResponse> getListJobsMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.ListJobsRequest, com.batcherhq.batcher.v1.ListJobsResponse> getListJobsMethod;
    if ((getListJobsMethod = JobServiceGrpc.getListJobsMethod) == null) {
      synchronized (JobServiceGrpc.class) {
        if ((getListJobsMethod = JobServiceGrpc.getListJobsMethod) == null) {
          JobServiceGrpc.getListJobsMethod = getListJobsMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.ListJobsRequest, com.batcherhq.batcher.v1.ListJobsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListJobs"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.ListJobsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.ListJobsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new JobServiceMethodDescriptorSupplier("ListJobs"))
              .build();
        }
      }
    }
    return getListJobsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.CancelJobRequest,
      com.batcherhq.batcher.v1.CancelJobResponse> getCancelJobMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CancelJob",
      requestType = com.batcherhq.batcher.v1.CancelJobRequest.class,
      responseType = com.batcherhq.batcher.v1.CancelJobResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.CancelJobRequest,
      com.batcherhq.batcher.v1.CancelJobResponse> getCancelJobMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.CancelJobRequest, com.batcherhq.batcher.v1.CancelJobResponse> getCancelJobMethod;
    if ((getCancelJobMethod = JobServiceGrpc.getCancelJobMethod) == null) {
      synchronized (JobServiceGrpc.class) {
        if ((getCancelJobMethod = JobServiceGrpc.getCancelJobMethod) == null) {
          JobServiceGrpc.getCancelJobMethod = getCancelJobMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.CancelJobRequest, com.batcherhq.batcher.v1.CancelJobResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CancelJob"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.CancelJobRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.CancelJobResponse.getDefaultInstance()))
              .setSchemaDescriptor(new JobServiceMethodDescriptorSupplier("CancelJob"))
              .build();
        }
      }
    }
    return getCancelJobMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.DeleteJobRequest,
      com.batcherhq.batcher.v1.DeleteJobResponse> getDeleteJobMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "DeleteJob",
      requestType = com.batcherhq.batcher.v1.DeleteJobRequest.class,
      responseType = com.batcherhq.batcher.v1.DeleteJobResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.DeleteJobRequest,
      com.batcherhq.batcher.v1.DeleteJobResponse> getDeleteJobMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.DeleteJobRequest, com.batcherhq.batcher.v1.DeleteJobResponse> getDeleteJobMethod;
    if ((getDeleteJobMethod = JobServiceGrpc.getDeleteJobMethod) == null) {
      synchronized (JobServiceGrpc.class) {
        if ((getDeleteJobMethod = JobServiceGrpc.getDeleteJobMethod) == null) {
          JobServiceGrpc.getDeleteJobMethod = getDeleteJobMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.DeleteJobRequest, com.batcherhq.batcher.v1.DeleteJobResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "DeleteJob"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.DeleteJobRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.DeleteJobResponse.getDefaultInstance()))
              .setSchemaDescriptor(new JobServiceMethodDescriptorSupplier("DeleteJob"))
              .build();
        }
      }
    }
    return getDeleteJobMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.WatchJobRequest,
      com.batcherhq.batcher.v1.WatchJobResponse> getWatchJobMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "WatchJob",
      requestType = com.batcherhq.batcher.v1.WatchJobRequest.class,
      responseType = com.batcherhq.batcher.v1.WatchJobResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.WatchJobRequest,
      com.batcherhq.batcher.v1.WatchJobResponse> getWatchJobMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.WatchJobRequest, com.batcherhq.batcher.v1.WatchJobResponse> getWatchJobMethod;
    if ((getWatchJobMethod = JobServiceGrpc.getWatchJobMethod) == null) {
      synchronized (JobServiceGrpc.class) {
        if ((getWatchJobMethod = JobServiceGrpc.getWatchJobMethod) == null) {
          JobServiceGrpc.getWatchJobMethod = getWatchJobMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.WatchJobRequest, com.batcherhq.batcher.v1.WatchJobResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "WatchJob"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.WatchJobRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.WatchJobResponse.getDefaultInstance()))
              .setSchemaDescriptor(new JobServiceMethodDescriptorSupplier("WatchJob"))
              .build();
        }
      }
    }
    return getWatchJobMethod;
  }

  private static volatile io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.ListJobResultsRequest,
      com.batcherhq.batcher.v1.ListJobResultsResponse> getListJobResultsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListJobResults",
      requestType = com.batcherhq.batcher.v1.ListJobResultsRequest.class,
      responseType = com.batcherhq.batcher.v1.ListJobResultsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.ListJobResultsRequest,
      com.batcherhq.batcher.v1.ListJobResultsResponse> getListJobResultsMethod() {
    io.grpc.MethodDescriptor<com.batcherhq.batcher.v1.ListJobResultsRequest, com.batcherhq.batcher.v1.ListJobResultsResponse> getListJobResultsMethod;
    if ((getListJobResultsMethod = JobServiceGrpc.getListJobResultsMethod) == null) {
      synchronized (JobServiceGrpc.class) {
        if ((getListJobResultsMethod = JobServiceGrpc.getListJobResultsMethod) == null) {
          JobServiceGrpc.getListJobResultsMethod = getListJobResultsMethod =
              io.grpc.MethodDescriptor.<com.batcherhq.batcher.v1.ListJobResultsRequest, com.batcherhq.batcher.v1.ListJobResultsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListJobResults"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.ListJobResultsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  com.batcherhq.batcher.v1.ListJobResultsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new JobServiceMethodDescriptorSupplier("ListJobResults"))
              .build();
        }
      }
    }
    return getListJobResultsMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static JobServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<JobServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<JobServiceStub>() {
        @java.lang.Override
        public JobServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new JobServiceStub(channel, callOptions);
        }
      };
    return JobServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static JobServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<JobServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<JobServiceBlockingStub>() {
        @java.lang.Override
        public JobServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new JobServiceBlockingStub(channel, callOptions);
        }
      };
    return JobServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static JobServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<JobServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<JobServiceFutureStub>() {
        @java.lang.Override
        public JobServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new JobServiceFutureStub(channel, callOptions);
        }
      };
    return JobServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * JobService runs durable batch jobs: a caller hands over thousands to
   * millions of items and walks away. Items go through the same core as online
   * requests, at background priority. A job survives restarts and kill -9: its
   * finished items are never redone and its unfinished ones run again.
   * </pre>
   */
  public static abstract class JobServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * CreateJob creates a job. The first message must be a JobSpec; the items
     * follow in chunks of any size, so that a large job never travels in one
     * message. The job starts once the caller half-closes.
     * An empty job is INVALID_ARGUMENT; more items than the server's limit is
     * RESOURCE_EXHAUSTED. A malformed item, or one naming an unknown model or
     * URL, becomes that item's error line naming its line number, unless the
     * spec sets fail_on_invalid, which makes it INVALID_ARGUMENT.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.CreateJobRequest> createJob(
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.CreateJobResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getCreateJobMethod(), responseObserver);
    }

    /**
     * <pre>
     * GetJob returns a job with its progress. An unknown id is NOT_FOUND.
     * </pre>
     */
    public void getJob(com.batcherhq.batcher.v1.GetJobRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.GetJobResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetJobMethod(), responseObserver);
    }

    /**
     * <pre>
     * ListJobs lists jobs, newest first, one page at a time.
     * </pre>
     */
    public void listJobs(com.batcherhq.batcher.v1.ListJobsRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.ListJobsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListJobsMethod(), responseObserver);
    }

    /**
     * <pre>
     * CancelJob ends a job: its queued items end cancelled, those in flight
     * may finish, and the job ends CANCELLED with its counts. A job that has
     * already ended is FAILED_PRECONDITION naming the state it ended in.
     * </pre>
     */
    public void cancelJob(com.batcherhq.batcher.v1.CancelJobRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.CancelJobResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCancelJobMethod(), responseObserver);
    }

    /**
     * <pre>
     * DeleteJob removes a job's rows and files. A running job is cancelled
     * first.
     * </pre>
     */
    public void deleteJob(com.batcherhq.batcher.v1.DeleteJobRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.DeleteJobResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDeleteJobMethod(), responseObserver);
    }

    /**
     * <pre>
     * WatchJob streams a job's progress: at most once a second, and on every
     * change of state. It ends after the message that reports a terminal
     * state.
     * </pre>
     */
    public void watchJob(com.batcherhq.batcher.v1.WatchJobRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.WatchJobResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getWatchJobMethod(), responseObserver);
    }

    /**
     * <pre>
     * ListJobResults streams a job's finished items in item order, from a
     * cursor, optionally only those of one outcome.
     * </pre>
     */
    public void listJobResults(com.batcherhq.batcher.v1.ListJobResultsRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.ListJobResultsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListJobResultsMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getCreateJobMethod(),
            io.grpc.stub.ServerCalls.asyncClientStreamingCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.CreateJobRequest,
                com.batcherhq.batcher.v1.CreateJobResponse>(
                  this, METHODID_CREATE_JOB)))
          .addMethod(
            getGetJobMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.GetJobRequest,
                com.batcherhq.batcher.v1.GetJobResponse>(
                  this, METHODID_GET_JOB)))
          .addMethod(
            getListJobsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.ListJobsRequest,
                com.batcherhq.batcher.v1.ListJobsResponse>(
                  this, METHODID_LIST_JOBS)))
          .addMethod(
            getCancelJobMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.CancelJobRequest,
                com.batcherhq.batcher.v1.CancelJobResponse>(
                  this, METHODID_CANCEL_JOB)))
          .addMethod(
            getDeleteJobMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.DeleteJobRequest,
                com.batcherhq.batcher.v1.DeleteJobResponse>(
                  this, METHODID_DELETE_JOB)))
          .addMethod(
            getWatchJobMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.WatchJobRequest,
                com.batcherhq.batcher.v1.WatchJobResponse>(
                  this, METHODID_WATCH_JOB)))
          .addMethod(
            getListJobResultsMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                com.batcherhq.batcher.v1.ListJobResultsRequest,
                com.batcherhq.batcher.v1.ListJobResultsResponse>(
                  this, METHODID_LIST_JOB_RESULTS)))
          .build();
    }
  }

  /**
   * <pre>
   * JobService runs durable batch jobs: a caller hands over thousands to
   * millions of items and walks away. Items go through the same core as online
   * requests, at background priority. A job survives restarts and kill -9: its
   * finished items are never redone and its unfinished ones run again.
   * </pre>
   */
  public static final class JobServiceStub extends io.grpc.stub.AbstractAsyncStub<JobServiceStub> {
    private JobServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected JobServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new JobServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * CreateJob creates a job. The first message must be a JobSpec; the items
     * follow in chunks of any size, so that a large job never travels in one
     * message. The job starts once the caller half-closes.
     * An empty job is INVALID_ARGUMENT; more items than the server's limit is
     * RESOURCE_EXHAUSTED. A malformed item, or one naming an unknown model or
     * URL, becomes that item's error line naming its line number, unless the
     * spec sets fail_on_invalid, which makes it INVALID_ARGUMENT.
     * </pre>
     */
    public io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.CreateJobRequest> createJob(
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.CreateJobResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncClientStreamingCall(
          getChannel().newCall(getCreateJobMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * GetJob returns a job with its progress. An unknown id is NOT_FOUND.
     * </pre>
     */
    public void getJob(com.batcherhq.batcher.v1.GetJobRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.GetJobResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetJobMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ListJobs lists jobs, newest first, one page at a time.
     * </pre>
     */
    public void listJobs(com.batcherhq.batcher.v1.ListJobsRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.ListJobsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListJobsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * CancelJob ends a job: its queued items end cancelled, those in flight
     * may finish, and the job ends CANCELLED with its counts. A job that has
     * already ended is FAILED_PRECONDITION naming the state it ended in.
     * </pre>
     */
    public void cancelJob(com.batcherhq.batcher.v1.CancelJobRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.CancelJobResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCancelJobMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * DeleteJob removes a job's rows and files. A running job is cancelled
     * first.
     * </pre>
     */
    public void deleteJob(com.batcherhq.batcher.v1.DeleteJobRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.DeleteJobResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDeleteJobMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * WatchJob streams a job's progress: at most once a second, and on every
     * change of state. It ends after the message that reports a terminal
     * state.
     * </pre>
     */
    public void watchJob(com.batcherhq.batcher.v1.WatchJobRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.WatchJobResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getWatchJobMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * ListJobResults streams a job's finished items in item order, from a
     * cursor, optionally only those of one outcome.
     * </pre>
     */
    public void listJobResults(com.batcherhq.batcher.v1.ListJobResultsRequest request,
        io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.ListJobResultsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getListJobResultsMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * JobService runs durable batch jobs: a caller hands over thousands to
   * millions of items and walks away. Items go through the same core as online
   * requests, at background priority. A job survives restarts and kill -9: its
   * finished items are never redone and its unfinished ones run again.
   * </pre>
   */
  public static final class JobServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<JobServiceBlockingStub> {
    private JobServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected JobServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new JobServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * GetJob returns a job with its progress. An unknown id is NOT_FOUND.
     * </pre>
     */
    public com.batcherhq.batcher.v1.GetJobResponse getJob(com.batcherhq.batcher.v1.GetJobRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetJobMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListJobs lists jobs, newest first, one page at a time.
     * </pre>
     */
    public com.batcherhq.batcher.v1.ListJobsResponse listJobs(com.batcherhq.batcher.v1.ListJobsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListJobsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * CancelJob ends a job: its queued items end cancelled, those in flight
     * may finish, and the job ends CANCELLED with its counts. A job that has
     * already ended is FAILED_PRECONDITION naming the state it ended in.
     * </pre>
     */
    public com.batcherhq.batcher.v1.CancelJobResponse cancelJob(com.batcherhq.batcher.v1.CancelJobRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCancelJobMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * DeleteJob removes a job's rows and files. A running job is cancelled
     * first.
     * </pre>
     */
    public com.batcherhq.batcher.v1.DeleteJobResponse deleteJob(com.batcherhq.batcher.v1.DeleteJobRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDeleteJobMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * WatchJob streams a job's progress: at most once a second, and on every
     * change of state. It ends after the message that reports a terminal
     * state.
     * </pre>
     */
    public java.util.Iterator<com.batcherhq.batcher.v1.WatchJobResponse> watchJob(
        com.batcherhq.batcher.v1.WatchJobRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getWatchJobMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * ListJobResults streams a job's finished items in item order, from a
     * cursor, optionally only those of one outcome.
     * </pre>
     */
    public java.util.Iterator<com.batcherhq.batcher.v1.ListJobResultsResponse> listJobResults(
        com.batcherhq.batcher.v1.ListJobResultsRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getListJobResultsMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * JobService runs durable batch jobs: a caller hands over thousands to
   * millions of items and walks away. Items go through the same core as online
   * requests, at background priority. A job survives restarts and kill -9: its
   * finished items are never redone and its unfinished ones run again.
   * </pre>
   */
  public static final class JobServiceFutureStub extends io.grpc.stub.AbstractFutureStub<JobServiceFutureStub> {
    private JobServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected JobServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new JobServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * GetJob returns a job with its progress. An unknown id is NOT_FOUND.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.batcherhq.batcher.v1.GetJobResponse> getJob(
        com.batcherhq.batcher.v1.GetJobRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetJobMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * ListJobs lists jobs, newest first, one page at a time.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.batcherhq.batcher.v1.ListJobsResponse> listJobs(
        com.batcherhq.batcher.v1.ListJobsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListJobsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * CancelJob ends a job: its queued items end cancelled, those in flight
     * may finish, and the job ends CANCELLED with its counts. A job that has
     * already ended is FAILED_PRECONDITION naming the state it ended in.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.batcherhq.batcher.v1.CancelJobResponse> cancelJob(
        com.batcherhq.batcher.v1.CancelJobRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCancelJobMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * DeleteJob removes a job's rows and files. A running job is cancelled
     * first.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<com.batcherhq.batcher.v1.DeleteJobResponse> deleteJob(
        com.batcherhq.batcher.v1.DeleteJobRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDeleteJobMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_GET_JOB = 0;
  private static final int METHODID_LIST_JOBS = 1;
  private static final int METHODID_CANCEL_JOB = 2;
  private static final int METHODID_DELETE_JOB = 3;
  private static final int METHODID_WATCH_JOB = 4;
  private static final int METHODID_LIST_JOB_RESULTS = 5;
  private static final int METHODID_CREATE_JOB = 6;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final JobServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(JobServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_GET_JOB:
          serviceImpl.getJob((com.batcherhq.batcher.v1.GetJobRequest) request,
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.GetJobResponse>) responseObserver);
          break;
        case METHODID_LIST_JOBS:
          serviceImpl.listJobs((com.batcherhq.batcher.v1.ListJobsRequest) request,
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.ListJobsResponse>) responseObserver);
          break;
        case METHODID_CANCEL_JOB:
          serviceImpl.cancelJob((com.batcherhq.batcher.v1.CancelJobRequest) request,
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.CancelJobResponse>) responseObserver);
          break;
        case METHODID_DELETE_JOB:
          serviceImpl.deleteJob((com.batcherhq.batcher.v1.DeleteJobRequest) request,
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.DeleteJobResponse>) responseObserver);
          break;
        case METHODID_WATCH_JOB:
          serviceImpl.watchJob((com.batcherhq.batcher.v1.WatchJobRequest) request,
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.WatchJobResponse>) responseObserver);
          break;
        case METHODID_LIST_JOB_RESULTS:
          serviceImpl.listJobResults((com.batcherhq.batcher.v1.ListJobResultsRequest) request,
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.ListJobResultsResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_CREATE_JOB:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.createJob(
              (io.grpc.stub.StreamObserver<com.batcherhq.batcher.v1.CreateJobResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class JobServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    JobServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return com.batcherhq.batcher.v1.JobsProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("JobService");
    }
  }

  private static final class JobServiceFileDescriptorSupplier
      extends JobServiceBaseDescriptorSupplier {
    JobServiceFileDescriptorSupplier() {}
  }

  private static final class JobServiceMethodDescriptorSupplier
      extends JobServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    JobServiceMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (JobServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new JobServiceFileDescriptorSupplier())
              .addMethod(getCreateJobMethod())
              .addMethod(getGetJobMethod())
              .addMethod(getListJobsMethod())
              .addMethod(getCancelJobMethod())
              .addMethod(getDeleteJobMethod())
              .addMethod(getWatchJobMethod())
              .addMethod(getListJobResultsMethod())
              .build();
        }
      }
    }
    return result;
  }
}
